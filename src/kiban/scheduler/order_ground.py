"""Order grounds of one shape, a threshold, and the index that finds their victims without
asking the predicate of every running job at every victim search.

A ``ThresholdGround`` is a ``Policy.may_preempt`` of the form: the waiting job has no lower
priority than the running one, its ``bound`` is strictly below the running job's ``level`` now,
and (optionally) the two share a queue unless the waiting job's queue has no quota. SRTF
(bound: the waiting job's run time; level: the running job's remaining time) and LAS (the two
jobs' attained-service levels) are of this form. As a predicate it answers as that; the victim
search (``kiban.scheduler.preemption``) reads its parts: once a cycle it sorts each queue's
running jobs by level (``ThresholdIndex``), and a search takes those above its bound by
bisection, in the queue's least-loss order, instead of walking them all.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate

from kiban.scheduler.snapshot import PendingJob, RunningJob

Bound = Callable[[PendingJob], float | None]
"""The waiting job's side of the threshold (None: it preempts nobody on the ground)."""
Level = Callable[[RunningJob, float], float]
"""The running job's side at a time: a waiting job whose bound is strictly below it may preempt."""


@dataclass(frozen=True, slots=True)
class ThresholdGround:
    """A preemption ground by threshold (see the module): a ``MayPreempt``.

    ``unlimited``: when set, the ground holds only within the waiting job's own queue, or
    anywhere when that queue is one of these (queues without quota); None: across queues."""

    bound: Bound
    level: Level
    unlimited: frozenset[str] | None = None

    def across(self, waiting_queue: str) -> bool:
        """Whether a waiting job of the queue may preempt jobs of other queues too."""
        unlimited = self.unlimited
        return unlimited is None or waiting_queue in unlimited

    def in_scope(self, waiting_queue: str, victim_queue: str) -> bool:
        """Whether a waiting job of the first queue may preempt any job of the second."""
        return waiting_queue == victim_queue or self.across(waiting_queue)

    def __call__(self, waiting: PendingJob, running: RunningJob, now: float) -> bool:
        if not self.in_scope(waiting.queue, running.queue) or waiting.priority < running.priority:
            return False
        bound = self.bound(waiting)
        return bound is not None and bound < self.level(running, now)


@dataclass(frozen=True, slots=True)
class ThresholdIndex:
    """One queue's running jobs of one flavor at one time, for a ``ThresholdGround``: those
    that may be a victim at all (not stopping, not back from a preemption's stop, past their
    minRuntime), by level, with their place in the queue's least-loss order and, from each
    level up, the GPUs they hold."""

    jobs: Sequence[RunningJob]  # the queue's running jobs of the flavor, least loss first
    levels: list[float]  # ascending
    places: list[int]  # the place in ``jobs`` of each level's job
    gpus_from: list[int]  # GPUs held by the jobs from each level's on (one more: 0)

    @classmethod
    def of(cls, ground: ThresholdGround, jobs: Sequence[RunningJob], now: float) -> ThresholdIndex:
        level = ground.level
        stoppable = [place for place, victim in enumerate(jobs) if victim.stoppable_at(now)]
        of_place = [level(jobs[place], now) for place in stoppable]
        # by level, then by place (a stable sort of places in ascending order)
        order = sorted(range(len(stoppable)), key=of_place.__getitem__)
        places = [stoppable[i] for i in order]
        held = [jobs[place].gpus for place in reversed(places)]
        gpus_from = list(accumulate(held, initial=0))
        gpus_from.reverse()
        return cls(jobs, [of_place[i] for i in order], places, gpus_from)

    def first(self, ground: ThresholdGround, waiting: PendingJob) -> int:
        """Where the levels strictly above the waiting job's bound begin (the end: none): two
        waiting jobs with the same answer, priority and last preemptor have the same victims."""
        bound = ground.bound(waiting)
        return len(self.levels) if bound is None else bisect_right(self.levels, bound)

    def gpus_above(self, ground: ThresholdGround, waiting: PendingJob) -> int:
        """At most how many GPUs the jobs of ``victims`` hold (its other filters aside)."""
        return self.gpus_from[self.first(ground, waiting)]

    def victims(self, first: int, waiting: PendingJob) -> Iterator[RunningJob]:
        """The jobs the ground lets ``waiting`` preempt (the scope aside: see ``in_scope``),
        least loss first, given ``first`` (``first``'s answer for it); never the job that
        preempted it last. Lazy: a search that finds room early orders only what it took."""
        jobs = self.jobs
        priority, last = waiting.priority, waiting.preempted_by
        places = [
            place
            for place in self.places[first:]
            if jobs[place].priority <= priority and jobs[place].id != last
        ]
        heapq.heapify(places)
        while places:
            yield jobs[heapq.heappop(places)]
