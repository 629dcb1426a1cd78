"""Traffic metrics per service and revision: in flight, queued, completed, latency, concurrency.

The router records every request here (from its event loop's thread); the autoscaler and
``kiban describe service`` read from other threads, hence the lock. Concurrency (requests in
flight plus requests waiting for a replica) is integrated over time into one-second buckets,
as Knative's autoscaler averages it, so a short burst counts for what it lasted.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kiban.serving.router.table import ServiceKey

HISTORY_S = 120
"""Seconds of per-second buckets kept: the autoscaler's stable window (60 s) and then some."""
LATENCY_WINDOW_S = 60.0
"""Latency percentiles and rates are over this recent window."""
MAX_LATENCY_SAMPLES = 10_000


@dataclass(frozen=True, slots=True)
class ConcurrencySample:
    """One second of a revision's traffic: average concurrency over it and requests started."""

    at: float
    """Start of the second, in the metrics clock (monotonic seconds)."""
    concurrency: float
    requests: int
    seconds: float = 1.0
    """Of the second observed: less than 1 for the current, unfinished second."""

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class RevisionSnapshot:
    """One revision's traffic now, for ``kiban describe service``."""

    revision: str
    in_flight: int
    queued: int
    completed: int
    errors: int
    rps: float
    p50_ms: float | None
    p99_ms: float | None


@dataclass(frozen=True, slots=True)
class ServiceSnapshot:
    """A service's traffic now: its revisions and the totals over them."""

    tenant: str
    service: str
    in_flight: int
    queued: int
    completed: int
    errors: int
    rps: float
    p50_ms: float | None
    p99_ms: float | None
    revisions: tuple[RevisionSnapshot, ...]


def _nearest_rank(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class RevisionCounter:
    """Counters and buckets of one revision; the router records through it, under the lock.

    The router keeps one per request (``TrafficMetrics.counter``) so that recording costs no
    lookups: this runs twice for every request through the router.
    """

    __slots__ = (
        "_clock",
        "_lock",
        "buckets",
        "completed",
        "concurrency",
        "current",
        "current_end",
        "errors",
        "in_flight",
        "last_t",
        "latencies",
        "queued",
        "started_at",
    )

    def __init__(self, clock: Callable[[], float], lock: threading.Lock) -> None:
        now = clock()
        self._clock = clock
        self._lock = lock
        self.in_flight = 0
        self.queued = 0
        self.completed = 0
        self.errors = 0
        self.concurrency = 0
        self.started_at = now
        self.last_t = now
        # [second, area (concurrency x seconds), requests started]
        self.buckets: deque[list[float]] = deque(maxlen=HISTORY_S)
        self.current = self._bucket(math.floor(now))
        self.current_end = self.current[0] + 1.0
        self.latencies: deque[tuple[float, float]] = deque(maxlen=MAX_LATENCY_SAMPLES)

    # -- recording (the router's thread) ------------------------------------------------------
    def was_queued(self) -> None:
        """A request arrived for this revision and waits for a replica."""
        with self._lock:
            self._advance(self._clock())
            self.queued += 1
            self.concurrency += 1
            self.current[2] += 1

    def dequeued(self, *, dispatched: bool) -> None:
        """A waiting request got a replica (``dispatched``) or gave up."""
        with self._lock:
            self._advance(self._clock())
            self.queued -= 1
            if dispatched:
                self.in_flight += 1
            else:
                self.concurrency -= 1

    def started(self) -> None:
        """A request arrived and went straight to a replica."""
        with self._lock:
            now = self._clock()
            if self.last_t < now < self.current_end:  # _advance's common case, inlined
                self.current[1] += self.concurrency * (now - self.last_t)
                self.last_t = now
            else:
                self._advance(now)
            self.in_flight += 1
            self.concurrency += 1
            self.current[2] += 1

    def finished(self, latency_s: float, *, ok: bool) -> None:
        """A dispatched request ended: answered (``ok``) or failed (5xx from us, cut off)."""
        with self._lock:
            now = self._clock()
            if self.last_t < now < self.current_end:  # _advance's common case, inlined
                self.current[1] += self.concurrency * (now - self.last_t)
                self.last_t = now
            else:
                self._advance(now)
            self.in_flight -= 1
            self.concurrency -= 1
            self.completed += 1
            if not ok:
                self.errors += 1
            self.latencies.append((now, latency_s))

    # -- the buckets ---------------------------------------------------------------------------
    def _advance(self, now: float) -> None:
        """Add the concurrency times the time since the last change to the buckets."""
        t = self.last_t
        if now <= t:
            return
        if now < self.current_end:  # the common case: still in the same second
            self.current[1] += self.concurrency * (now - t)
            self.last_t = now
            return
        level = self.concurrency
        while True:
            bucket = self._bucket(math.floor(t))
            end = min(now, bucket[0] + 1.0)
            bucket[1] += level * (end - t)
            if end >= now:
                break
            t = end
        self.current = self._bucket(math.floor(now))
        self.current_end = self.current[0] + 1.0
        self.last_t = now

    def _bucket(self, second: float) -> list[float]:
        buckets = self.buckets
        if buckets and buckets[-1][0] == second:
            return buckets[-1]
        if buckets and second - buckets[-1][0] > HISTORY_S:
            buckets.clear()
        previous = buckets[-1][0] if buckets else second - 1
        for missing in range(int(previous) + 1, int(second)):
            buckets.append([float(missing), 0.0, 0.0])
        bucket = [second, 0.0, 0.0]
        buckets.append(bucket)
        return bucket


class TrafficMetrics:
    """Counters of every service and revision the router has seen; safe across threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._revisions: dict[ServiceKey, dict[str, RevisionCounter]] = {}

    def counter(self, key: ServiceKey, revision: str) -> RevisionCounter:
        """The counters of ``revision`` of the service ``key`` (made on first use)."""
        revisions = self._revisions.get(key)
        entry = revisions.get(revision) if revisions is not None else None
        if entry is not None:
            return entry
        with self._lock:
            revisions = self._revisions.setdefault(key, {})
            entry = revisions.get(revision)
            if entry is None:
                entry = revisions[revision] = RevisionCounter(self.clock, self._lock)
            return entry

    # -- reading (any thread) -----------------------------------------------------------------
    def concurrency_samples(
        self, tenant: str, service: str, revision: str, now: float | None = None
    ) -> list[ConcurrencySample]:
        """Per-second average concurrency and requests of a revision, oldest first.

        Every second since the revision was first seen is present (zero-filled), up to
        ``HISTORY_S``; the last one is the current second, observed for less than a second.
        """
        with self._lock:
            now = self.clock() if now is None else now
            entry = self._revisions.get((tenant, service), {}).get(revision)
            if entry is None:
                return []
            entry._advance(now)
            samples = []
            for second, area, requests in entry.buckets:
                start = max(second, entry.started_at)
                seconds = min(second + 1.0, now) - start
                if seconds <= 0:
                    continue
                samples.append(
                    ConcurrencySample(
                        at=second,
                        concurrency=area / seconds,
                        requests=int(requests),
                        seconds=seconds,
                    )
                )
            return samples

    def waiting(self, tenant: str, service: str, revision: str) -> int:
        """Requests waiting for a replica of the revision right now (scale from zero)."""
        with self._lock:
            entry = self._revisions.get((tenant, service), {}).get(revision)
            return entry.queued if entry is not None else 0

    def revisions(self, tenant: str, service: str) -> list[str]:
        with self._lock:
            return list(self._revisions.get((tenant, service), {}))

    def snapshot(self, tenant: str, service: str, now: float | None = None) -> ServiceSnapshot:
        """The service's traffic now: latency percentiles and rps over the last minute."""
        with self._lock:
            now = self.clock() if now is None else now
            since = now - LATENCY_WINDOW_S
            per_revision: list[RevisionSnapshot] = []
            everything: list[float] = []
            total_rps = 0.0
            for name, entry in self._revisions.get((tenant, service), {}).items():
                recent = sorted(lat for at, lat in entry.latencies if at >= since)
                everything.extend(recent)
                span = min(LATENCY_WINDOW_S, max(now - entry.started_at, 1e-9))
                rps = len(recent) / span
                total_rps += rps
                per_revision.append(
                    RevisionSnapshot(
                        revision=name,
                        in_flight=entry.in_flight,
                        queued=entry.queued,
                        completed=entry.completed,
                        errors=entry.errors,
                        rps=rps,
                        p50_ms=_ms(_nearest_rank(recent, 50)),
                        p99_ms=_ms(_nearest_rank(recent, 99)),
                    )
                )
        everything.sort()
        return ServiceSnapshot(
            tenant=tenant,
            service=service,
            in_flight=sum(r.in_flight for r in per_revision),
            queued=sum(r.queued for r in per_revision),
            completed=sum(r.completed for r in per_revision),
            errors=sum(r.errors for r in per_revision),
            rps=total_rps,
            p50_ms=_ms(_nearest_rank(everything, 50)),
            p99_ms=_ms(_nearest_rank(everything, 99)),
            revisions=tuple(per_revision),
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0
