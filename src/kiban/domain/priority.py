"""Priority classes: the built-in set, used when the cluster policy declares none."""

from __future__ import annotations

DEFAULT_PRIORITY_CLASSES: dict[str, int] = {"low": 100, "normal": 1000, "high": 10000}
DEFAULT_PRIORITY_CLASS = "normal"
PREEMPTING_PRIORITY_CLASSES = frozenset({"high"})  # PreemptLowerPriority; the others: Never
