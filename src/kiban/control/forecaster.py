"""Start-time forecasts computed beside the control loop, so that they never delay a pass.

A forecast runs the scheduler core forward over the running jobs' maxRuntimes
(``kiban.scheduler.forward.forecast``): a few hundred cycles, which for thousands of waiting
jobs takes seconds. The loop hands each pass's snapshot over (the snapshot is immutable, so it
is safe to share) and records whatever estimates are newest; a snapshot handed over while one
is being forecast replaces any older one still waiting. Without ``start`` (tests driving single
passes) the forecast runs at once, in the caller's thread.
"""

from __future__ import annotations

import logging
import threading

from kiban.scheduler.forward import forecast
from kiban.scheduler.policy import Policy
from kiban.scheduler.snapshot import Snapshot

log = logging.getLogger("kiban.control")

FORECAST_CYCLES = 200
"""Cycles of one forecast: enough for every job of a few hundred waiting to get an estimate."""


class Forecaster:
    """The newest estimates, and a worker thread that computes the next ones."""

    def __init__(self, max_cycles: int = FORECAST_CYCLES) -> None:
        self.max_cycles = max_cycles
        self._estimates: dict[str, float | None] = {}
        self._next: tuple[Snapshot, Policy] | None = None
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def estimates(self) -> dict[str, float | None]:
        """Job id to estimated start (None: none within the forecast's horizon)."""
        return self._estimates

    def submit(self, snapshot: Snapshot, policy: Policy) -> None:
        """Forecast from this snapshot: now without a worker, else as soon as it is free."""
        if self._thread is None:
            self._estimates = forecast(snapshot, policy, max_cycles=self.max_cycles)
            return
        with self._ready:
            self._next = (snapshot, policy)
            self._ready.notify()

    def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="kiban-forecast", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._ready:
            self._stopping = True
            self._ready.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._ready:
                while self._next is None and not self._stopping:
                    self._ready.wait()
                if self._stopping or self._next is None:
                    return
                (snapshot, policy), self._next = self._next, None
            try:
                self._estimates = forecast(snapshot, policy, max_cycles=self.max_cycles)
            except Exception:  # an estimate is advice: a failure must not stop the next one
                log.exception("start-time forecast failed")
