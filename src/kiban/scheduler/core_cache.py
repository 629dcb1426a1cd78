"""What the core keeps between the cycles of one caller: the capacity index of every flavor, and
the running jobs of every queue in the order victims are chosen.

Both are updated from each snapshot by comparing objects by identity, so a caller that reuses
the views and running jobs that did not change (the control loop, the benchmark, the simulator
and the forecast do) pays only for what changed. Both are canonical: what they hold equals
what a fresh build would, and the decisions are the same with or without a cache.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.snapshot import RunningJob

LossKey = tuple[float | int | str, ...]


def loss_key(job: RunningJob) -> LossKey:
    """Least loss first: lower priority, the latest checkpoint (least work since it, at any
    time), the most recently started, then the id."""
    progress = job.last_progress_at if job.last_progress_at is not None else job.started_at
    return (job.priority, -progress, -job.started_at, job.id)


class RunningIndex:
    """Each queue's running jobs, sorted by ``loss_key``, kept up to date job by job."""

    def __init__(self) -> None:
        self._jobs: dict[str, RunningJob] = {}
        self._keys: dict[str, list[LossKey]] = {}
        self._queues: dict[str, list[RunningJob]] = {}
        self._seen: Sequence[RunningJob] | None = None

    def update(self, running: Sequence[RunningJob]) -> None:
        """Bring the index to these running jobs (nothing to do for the same sequence)."""
        if running is self._seen:
            return
        jobs = self._jobs
        if not jobs:
            self._build(running)
            return
        for job in running:
            old = jobs.get(job.id)
            if old is job:
                continue
            if old is not None:
                self._remove(old)
            self._add(job)
        if len(jobs) != len(running):
            present = {job.id for job in running}
            for gone in [job for job_id, job in jobs.items() if job_id not in present]:
                self._remove(gone)
        self._seen = running

    def _build(self, running: Sequence[RunningJob]) -> None:
        by_queue: dict[str, list[tuple[LossKey, RunningJob]]] = {}
        for job in running:
            by_queue.setdefault(job.queue, []).append((loss_key(job), job))
            self._jobs[job.id] = job
        for queue, entries in by_queue.items():
            entries.sort(key=lambda entry: entry[0])
            self._keys[queue] = [key for key, _ in entries]
            self._queues[queue] = [job for _, job in entries]
        self._seen = running

    def in_queue(self, queue: str) -> list[RunningJob]:
        """The queue's running jobs, least loss first (the list is the index's: read only)."""
        return self._queues.get(queue, [])

    def _add(self, job: RunningJob) -> None:
        key = loss_key(job)
        keys = self._keys.setdefault(job.queue, [])
        at = bisect.bisect_left(keys, key)
        keys.insert(at, key)
        self._queues.setdefault(job.queue, []).insert(at, job)
        self._jobs[job.id] = job

    def _remove(self, job: RunningJob) -> None:
        keys = self._keys[job.queue]
        at = bisect.bisect_left(keys, loss_key(job))
        del keys[at]
        del self._queues[job.queue][at]
        del self._jobs[job.id]


class CoreCache:
    """The capacity index and the running index, kept for one caller's cycles."""

    def __init__(self) -> None:
        self.capacity = CapacityCache()
        self.running = RunningIndex()
