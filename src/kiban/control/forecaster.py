"""Start-time forecasts computed beside the control loop, so that they never delay a pass.

A forecast runs the scheduler core forward over the running jobs' maxRuntimes
(``kiban.scheduler.forward.forecast``): a few hundred cycles, which for thousands of waiting
jobs takes seconds. The loop hands each pass's snapshot over (the snapshot is immutable, so it
is safe to share) and records whatever estimates are newest; a snapshot handed over while one
is being forecast replaces any older one still waiting. Without ``start`` (tests driving single
passes) the forecast runs at once, in the caller's thread.

Running jobs with no maxRuntime end, in the forecast, when their run time estimated from
history does (``kiban.services.runtime_estimates``), so a job waiting behind one still gets a
start time; such starts are marked estimated (``estimated``), and ``EstimatedMarks`` records
the mark on each job, for the API and ``kiban describe``.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from kiban.scheduler.forward import forecast
from kiban.scheduler.policy import Policy
from kiban.scheduler.snapshot import Snapshot
from kiban.store.models import Job

log = logging.getLogger("kiban.control")

FORECAST_CYCLES = 200
"""Cycles of one forecast: enough for every job of a few hundred waiting to get an estimate."""


class Forecaster:
    """The newest estimates, and a worker thread that computes the next ones."""

    def __init__(self, max_cycles: int = FORECAST_CYCLES) -> None:
        self.max_cycles = max_cycles
        self._estimates: dict[str, float | None] = {}
        self._estimated: frozenset[str] = frozenset()
        self._next: tuple[Snapshot, Policy] | None = None
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def estimates(self) -> dict[str, float | None]:
        """Job id to estimated start (None: none within the forecast's horizon)."""
        return self._estimates

    def estimated(self) -> frozenset[str]:
        """Jobs whose estimated start rests on estimated run times (not only maxRuntimes)."""
        return self._estimated

    def _forecast(self, snapshot: Snapshot, policy: Policy) -> None:
        estimated: set[str] = set()
        starts = forecast(snapshot, policy, max_cycles=self.max_cycles, estimated=estimated)
        self._estimates, self._estimated = starts, frozenset(estimated)

    def submit(self, snapshot: Snapshot, policy: Policy) -> None:
        """Forecast from this snapshot: now without a worker, else as soon as it is free."""
        if self._thread is None:
            self._forecast(snapshot, policy)
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
                self._forecast(snapshot, policy)
            except Exception:  # an estimate is advice: a failure must not stop the next one
                log.exception("start-time forecast failed")


class EstimatedMarks:
    """Writes ``Job.eta_estimated`` where it changed: set on jobs whose forecast start became
    estimated, cleared on those whose no longer is (read back from the store at first)."""

    def __init__(self) -> None:
        self._marked: set[str] | None = None

    def write(self, sessions: sessionmaker[Session], estimated: frozenset[str]) -> None:
        with sessions() as session:
            if self._marked is None:
                query = select(Job.id).where(Job.eta_estimated.is_(True))
                self._marked = set(session.scalars(query))
            marked = self._marked
            added, removed = estimated - marked, marked - estimated
            if not added and not removed:
                return
            for ids, value in ((added, True), (removed, False)):
                listed = sorted(ids)
                for start in range(0, len(listed), 500):
                    chunk = listed[start : start + 500]
                    session.execute(
                        update(Job).where(Job.id.in_(chunk)).values(eta_estimated=value)
                    )
            session.commit()
            self._marked = set(estimated)
