"""Waiting for a condition in tests: poll it until a deadline, never sleep a guessed time."""

from __future__ import annotations

import asyncio
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
    deadline = _deadline(timeout)
    while True:
        last = probe()
        if last:
            return last
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(what, timeout, last)
        time.sleep(min(interval, left))


async def eventually_async(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout: float = 10.0,
    interval: float = 0.01,
) -> T:
    """``eventually`` for code on an event loop: it waits with ``asyncio.sleep``, so the tasks
    it waits for run meanwhile."""
    deadline = _deadline(timeout)
    while True:
        last = probe()
        if last:
            return last
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(what, timeout, last)
        await asyncio.sleep(min(interval, left))


def _deadline(timeout: float) -> float:
    if timeout < 0:
        raise ValueError(f"timeout must not be negative, got {timeout}")
    return time.monotonic() + timeout


def _timed_out(what: str, timeout: float, last: object) -> TimedOut:
    return TimedOut(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
