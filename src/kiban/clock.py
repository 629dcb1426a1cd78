"""Time as a dependency: the system clock in production, a manual one in tests and simulations."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Something that tells the time in UNIX seconds."""

    def now(self) -> float: ...


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        return time.time()
