"""Priority classes. The scheduler issue makes them configurable; these are the defaults."""

from __future__ import annotations

DEFAULT_PRIORITY_CLASSES: dict[str, int] = {"low": 100, "normal": 1000, "high": 10000}
DEFAULT_PRIORITY_CLASS = "normal"
