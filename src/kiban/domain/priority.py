"""Priority classes: the built-in set, used when the cluster policy declares none."""

from __future__ import annotations

# ``interactive`` is what notebooks run at unless the policy names another class
# (``notebookPriorityClass``): below the default, never preempting.
# ``serving`` is what inference services' replicas run at unless they name a class: above
# training, and it may preempt lower-priority training to scale up.
DEFAULT_PRIORITY_CLASSES: dict[str, int] = {
    "low": 100,
    "interactive": 500,
    "normal": 1000,
    "serving": 5000,
    "high": 10000,
}
DEFAULT_PRIORITY_CLASS = "normal"
# PreemptLowerPriority; the others: Never.
PREEMPTING_PRIORITY_CLASSES = frozenset({"serving", "high"})
