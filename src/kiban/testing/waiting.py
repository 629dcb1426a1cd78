"""Waiting for a condition in tests: poll it until a deadline, never sleep a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TimedOut(AssertionError):
    """The condition a test waited for did not come true in time (a test failure)."""


def eventually(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout: float = 10.0,
    interval: float = 0.05,
) -> T:
    """Call ``probe`` until it returns something truthy and return that; after ``timeout``
    seconds fail with ``TimedOut``, naming ``what`` was waited for and the last answer.

    The probe runs at least once, and once more at the deadline, so a slow probe is never
    failed without a last look.
    """
    if timeout < 0:
        raise ValueError(f"timeout must not be negative, got {timeout}")
    deadline = time.monotonic() + timeout
    while True:
        last = probe()
        if last:
            return last
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimedOut(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
        time.sleep(min(interval, left))
