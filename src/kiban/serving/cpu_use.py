"""CPU use of a revision's replicas, for the autoscaler's ``cpu`` metric.

The executor reports each replica's CPU seconds since it started; the service controller reads
them every pass and this meter turns two readings in a row into a sample: how busy the replicas
were over that interval, relative to the CPU each one requests. As Kubernetes' HPA measures a
Deployment, the value is the replicas' mean utilization times how many were read, so ``1.0``
means one replica's request in full use, and a replica read for the first time (no earlier
reading to subtract) adds to the count at the others' mean rather than as idle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

HISTORY_S = 120.0
"""Seconds of samples kept: the autoscaler's stable window (60 s) and then some."""
READ_EVERY_S = 1.0
"""Readings of a revision this far apart at least: CPU time is counted in 10 ms ticks, so a
shorter interval is mostly rounding (Knative's autoscaler scrapes its metrics each second)."""


@dataclass(frozen=True, slots=True)
class CpuSample:
    """The replicas' CPU use over one interval between two readings."""

    at: float
    """Start of the interval, in the clock the readings were taken by."""
    seconds: float
    utilization: float
    """Mean of used / requested CPU over the replicas read, times how many were read."""


@dataclass(slots=True)
class _Revision:
    read_at: float
    readings: dict[str, float]
    samples: deque[CpuSample]


class CpuMeter:
    """Each revision's replica readings of the last pass, and its recent samples."""

    def __init__(self, history_s: float = HISTORY_S, read_every_s: float = READ_EVERY_S) -> None:
        self._history_s = history_s
        self._read_every_s = read_every_s
        self._revisions: dict[Hashable, _Revision] = {}

    def due(self, revision: Hashable, now: float) -> bool:
        """Whether ``revision``'s replicas are to be read now (``read_every_s`` since the last)."""
        entry = self._revisions.get(revision)
        return entry is None or now - entry.read_at >= self._read_every_s

    def observe(
        self,
        revision: Hashable,
        readings: Mapping[str, float],
        *,
        requested_cores: float,
        now: float,
    ) -> None:
        """Record one pass's readings (replica -> CPU seconds used so far) of ``revision``'s
        replicas; a sample is made from those also read in the pass before (none when no
        replica was: no replica read says nothing of how busy replicas are)."""
        if requested_cores <= 0:
            raise ValueError("requested_cores must be positive")
        entry = self._revisions.get(revision)
        if entry is None:
            self._revisions[revision] = _Revision(now, dict(readings), deque())
            return
        elapsed = now - entry.read_at
        if elapsed < self._read_every_s:
            return
        # A reading lower than the last (a process of the replica ended unreaped) counts as idle.
        rates = [
            max(0.0, used - entry.readings[replica]) / elapsed
            for replica, used in readings.items()
            if replica in entry.readings
        ]
        if rates:
            mean = sum(rates) / len(rates) / requested_cores
            entry.samples.append(CpuSample(entry.read_at, elapsed, mean * len(readings)))
        entry.read_at, entry.readings = now, dict(readings)
        while entry.samples and entry.samples[0].at + entry.samples[0].seconds < (
            now - self._history_s
        ):
            entry.samples.popleft()

    def samples(self, revision: Hashable) -> list[CpuSample]:
        """The revision's samples, oldest first (empty before two passes have read it)."""
        entry = self._revisions.get(revision)
        return list(entry.samples) if entry is not None else []

    def forget(self, revision: Hashable) -> None:
        """Drop a revision that no longer scales (deleted, failed, or out of the traffic)."""
        self._revisions.pop(revision, None)
