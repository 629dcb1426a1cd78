"""A clock that moves only when told to."""

from __future__ import annotations


class ManualClock:
    """Starts at ``start`` and advances by ``advance``; never reads the system time."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self._now += seconds
        return self._now
