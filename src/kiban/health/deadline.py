"""Run calls that may hang (an NVML query, a check) in worker threads, each with a deadline.

A call not done by its deadline is abandoned, not waited for: its daemon thread may finish or
hang on, and the caller goes on with ``TimedOut`` in its place.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K")
T = TypeVar("T")


class TimedOut(Exception):
    """A call did not finish within its deadline."""

    def __init__(self, what: str, timeout_s: float) -> None:
        super().__init__(f"{what} did not finish within {timeout_s:g} s")
        self.what = what
        self.timeout_s = timeout_s


class Outcome(Generic[T]):
    """What a call gave, or raised, and how long it took (seconds)."""

    def __init__(self) -> None:
        self.value: T | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.done = threading.Event()


def start(function: Callable[[], T], name: str) -> Outcome[T]:
    """Run ``function`` in a daemon thread of its own; the outcome fills in when it is done."""
    outcome: Outcome[T] = Outcome()

    def run() -> None:
        began = time.perf_counter()
        try:
            outcome.value = function()
        except BaseException as exc:
            outcome.error = exc
        finally:
            outcome.seconds = time.perf_counter() - began
            outcome.done.set()

    threading.Thread(target=run, name=f"kiban-{name}", daemon=True).start()
    return outcome


def call_with_deadline(function: Callable[[], T], timeout_s: float, what: str) -> T:
    """``function()``, or ``TimedOut`` when it takes longer than ``timeout_s``."""
    outcome = start(function, what)
    if not outcome.done.wait(timeout_s):
        raise TimedOut(what, timeout_s)
    if outcome.error is not None:
        raise outcome.error
    return outcome.value  # type: ignore[return-value]


def call_all_with_deadline(
    functions: Mapping[K, Callable[[], T]], timeout_s: float
) -> dict[K, Outcome[T]]:
    """Run every call at once; each must finish within ``timeout_s`` of the start. A call that
    did not has ``error`` set to ``TimedOut`` and ``seconds`` to the timeout."""
    outcomes = {key: start(function, str(key)) for key, function in functions.items()}
    deadline = time.monotonic() + timeout_s
    for key, outcome in outcomes.items():
        if not outcome.done.wait(max(deadline - time.monotonic(), 0.0)):
            late: Outcome[T] = Outcome()
            late.error = TimedOut(str(key), timeout_s)
            late.seconds = timeout_s
            outcomes[key] = late
    return outcomes
