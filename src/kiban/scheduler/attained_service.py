"""Least attained service (Tiresias' discretized LAS), the order of ``LeastAttainedService`` queues.

A job's attained service is the GPU-seconds its attempts have run (earlier attempts for a
pending job; earlier ones plus this one so far for a running job). Jobs fall into a few levels
by it (``LAS_THRESHOLDS_GPU_S``): a queue with this strategy serves the lower level first, then
priority and first come, first served within a level, so new and short jobs pass long ones
without knowing anybody's run time.

Its preemption ground is bounded so that it never cascades:

- only within the preemptor's own queue (across quota queues it would fight reclaim);
- only a running job whose level is strictly higher than the waiting job's level;
- only a running job that has dropped a level *during this attempt* (its level now is higher
  than at its start): a job resumed after a preemption is not preempted again on this ground
  until it has run through its next threshold, so each job is preempted on it at most once per
  level, ``len(LAS_THRESHOLDS_GPU_S)`` times in all;
- never by a job it preempted last (the core's rule for every ground), nor of higher priority.

The ground is one-way at any one time: levels are read at the same instant for both jobs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, replace

from kiban.scheduler.expected_service import expected_service, shortest_expected_queues
from kiban.scheduler.policy import MayPreempt, OrderKey, Policy
from kiban.scheduler.snapshot import PendingJob, QueueStrategy, QueueView, RunningJob

LAS_THRESHOLDS_GPU_S: tuple[float, ...] = (3600.0, 7200.0, 18000.0)
"""Attained GPU-seconds at which a job drops to the next of four levels (the example thresholds
of Tiresias' simulator for its GPU-time-based discretized LAS: 1, 2 and 5 GPU-hours)."""


def las_level(attained_gpu_s: float) -> int:
    """The level of a job with that much attained service (0 is served first)."""
    return bisect.bisect_right(LAS_THRESHOLDS_GPU_S, attained_gpu_s)


def attained_now(job: RunningJob, now: float) -> float:
    """GPU-seconds a running job has received: before this attempt and in it so far."""
    return job.attained_service + job.gpus * max(now - job.started_at, 0.0)


def least_attained_first(job: PendingJob) -> tuple[float | int | str, ...]:
    """Higher priority first, then the lower level, then first come (Tiresias' order)."""
    return (-job.priority, las_level(job.attained_service), job.submitted_at, job.sequence, job.id)


def las_may_preempt(waiting: PendingJob, running: RunningJob, now: float) -> bool:
    """The bounded LAS ground (see the module): same queue, no higher priority, a strictly
    higher level now, and a level dropped during this attempt."""
    if waiting.queue != running.queue or waiting.priority < running.priority:
        return False
    level_now = las_level(attained_now(running, now))
    if level_now <= las_level(running.attained_service):
        return False
    return las_level(waiting.attained_service) < level_now


def next_level_after(attained_gpu_s: float, gpus: int) -> float | None:
    """Run time after which a job holding ``gpus`` GPUs drops to its next level (None: it is
    in the last). A caller that wants LAS preemption on time wakes the core then."""
    level = las_level(attained_gpu_s)
    if level >= len(LAS_THRESHOLDS_GPU_S) or gpus <= 0:
        return None
    return max((LAS_THRESHOLDS_GPU_S[level] - attained_gpu_s) / gpus, 0.0)


def las_queues(queues: Iterable[QueueView]) -> frozenset[str]:
    """The queues that order by least attained service."""
    return frozenset(q.name for q in queues if q.strategy is QueueStrategy.LEAST_ATTAINED_SERVICE)


@dataclass(frozen=True, slots=True)
class LasOrder:
    """The order key of a policy whose ``queues`` order by least attained service: their jobs
    by level first; the jobs of ``by_size`` (ShortestExpectedService queues,
    ``kiban.scheduler.expected_service``) by expected GPU-seconds first; the jobs of other
    queues keep ``base``'s order, at level 0 and size 0, so that keys of different queues stay
    comparable."""

    base: OrderKey
    queues: frozenset[str]
    by_size: frozenset[str] = frozenset()

    def __call__(self, job: PendingJob) -> tuple[float | int | str, ...]:
        level = las_level(job.attained_service) if job.queue in self.queues else 0
        size = expected_service(job) if job.queue in self.by_size else 0.0
        return (-job.priority, level, size, *self.base(job))


@dataclass(frozen=True, slots=True)
class LasGround:
    """The bounded LAS ground for the waiting jobs of ``queues``, beside ``base`` (the policy's
    own order ground, if any)."""

    base: MayPreempt | None
    queues: frozenset[str]

    def __call__(self, waiting: PendingJob, running: RunningJob, now: float) -> bool:
        if waiting.queue in self.queues and las_may_preempt(waiting, running, now):
            return True
        return self.base is not None and self.base(waiting, running, now)


def with_queue_strategies(policy: Policy, queues: Iterable[QueueView]) -> Policy:
    """``policy`` as the queues' strategies make it: unchanged when no queue orders by least
    attained service or shortest expected service (or when it already is); else ``LasOrder``
    and, when the policy preempts and some queue is LeastAttainedService, ``LasGround``."""
    queues = list(queues)
    las = las_queues(queues)
    by_size = shortest_expected_queues(queues)
    key = policy.order_key
    if not las and not by_size:
        return policy
    if isinstance(key, LasOrder) and (key.queues, key.by_size) == (las, by_size):
        return policy
    ground = policy.may_preempt
    if isinstance(key, LasOrder):
        key = key.base
    if isinstance(ground, LasGround):
        ground = ground.base
    return replace(
        policy,
        order_key=LasOrder(key, las, by_size),
        may_preempt=LasGround(ground, las) if policy.preemption and las else ground,
    )
