"""The policies a replay compares, each a configuration of the one scheduler core.

A ``SimPolicy`` is the core's ``Policy`` (order key, preemption, backfill, admission charge),
the strategy its queues use (None: as configured), whether it knows the trace's durations (an
oracle: every job's ``max_runtime`` is its remaining run time, so backfill and the order key
see the truth), and what it takes as a tenant's fair-share standing:

- ``usage``: decayed GPU-seconds per weight, as the control loop keeps them (kiban);
- ``share``: the tenant's dominant share of the cluster now (max of its GPU, CPU and memory
  shares), with the in-cycle admission charge in the same unit: that is DRF, progressive
  filling by lowest dominant share, on the same ordering and fair-share preemption path;
- ``none``: every tenant equal, no in-cycle charge, so queue heads go by the order key alone.

Non-oracle policies see a job's time limit only when the trace has one (the Philly trace has
none: backfill then never holds reservations, because no running job has a known end).

``srtf`` and ``las`` preempt on the core's ``order`` ground (``Policy.may_preempt``): a waiting
job may stop a running one of no higher priority whose remaining time (srtf) or attained-service
level (las) is strictly greater, on a snapshot where the simulator has filled in both. Victims
are then taken in the core's least-loss order, and the preemptor must fit quota and placement.
Neither holds backfill reservations: like the Tiresias and Helios simulators, a job that does
not fit waits while smaller ones start. Their ground holds only within the preemptor's own queue
(its team's partition, as Helios runs SRTF per virtual cluster), or anywhere when that queue has
no quota: a borrowing job that preempted a lender's job on this ground would be reclaimed by it,
and the lender preempted again (a loop the replays found; see ``within_partition``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Literal

from kiban.scheduler.attained_service import (
    LAS_THRESHOLDS_GPU_S,
    attained_now,
    las_level,
    least_attained_first,
    next_level_after,
)
from kiban.scheduler.order_ground import ThresholdGround
from kiban.scheduler.policy import DEFAULT_POLICY, MayPreempt, Policy
from kiban.scheduler.snapshot import PendingJob, QueueStrategy, QueueView, RunningJob

Standing = Literal["usage", "share", "none"]


def shortest_first(job: PendingJob) -> tuple[float | int | str, ...]:
    """Higher priority first, then the least (remaining) run time, then first come."""
    remaining = job.max_runtime if job.max_runtime is not None else math.inf
    return (-job.priority, remaining, job.submitted_at, job.sequence, job.id)


def remaining_now(job: RunningJob, now: float) -> float:
    """A running job's remaining run time at ``now`` (infinite when its end is unknown)."""
    if job.max_runtime is None:
        return math.inf
    return job.max_runtime - (now - job.started_at)


def _runtime(waiting: PendingJob) -> float | None:
    """SRTF's bound: the waiting job's run time (None, unknown: it preempts nobody)."""
    return waiting.max_runtime


def _level_now(running: RunningJob, now: float) -> float:
    """LAS's level of a running job at ``now``."""
    return las_level(attained_now(running, now))


def _level(waiting: PendingJob) -> float:
    """LAS's level of a waiting job."""
    return las_level(waiting.attained_service)


srtf_may_preempt = ThresholdGround(_runtime, remaining_now)
"""SRTF's ground: the waiting job has strictly less left to run than the running one (and
no lower priority). One-way: the victim's remaining time only grows by its lost work."""

las_may_preempt = ThresholdGround(_level, _level_now)
"""LAS's ground: the waiting job is in a strictly lower queue than the running one is now
(and has no lower priority). One-way at any one time: both levels are read at ``now``."""


def las_next_level_s(attained_gpu_s: float, gpus: int) -> float | None:
    """Run time after which a job holding ``gpus`` GPUs moves to its next LAS queue (None: it is
    in the last). The simulator wakes the core then, as Tiresias re-sorts when a job demotes."""
    level = las_level(attained_gpu_s)
    if level >= len(LAS_THRESHOLDS_GPU_S) or gpus <= 0:
        return None
    return max((LAS_THRESHOLDS_GPU_S[level] - attained_gpu_s) / gpus, 0.0)


def within_partition(may_preempt: MayPreempt, queues: Iterable[QueueView]) -> MayPreempt:
    """``may_preempt`` limited to victims of the preemptor's own queue, or to any victim when
    the preemptor's queue has no quota (then any GPUs freed are its to use). Across quota
    queues it would fight reclaim: a job that borrows takes a lender's job's GPUs on the order
    ground, the lender reclaims them from the borrower's queue, whose next short job takes them
    again, and so on."""
    unlimited = frozenset(q.name for q in queues if q.nominal is None)
    if isinstance(may_preempt, ThresholdGround) and may_preempt.unlimited is None:
        return replace(may_preempt, unlimited=unlimited)  # the same, its parts kept in view

    def scoped(waiting: PendingJob, running: RunningJob, now: float) -> bool:
        if waiting.queue != running.queue and waiting.queue not in unlimited:
            return False
        return may_preempt(waiting, running, now)

    return scoped


NextLevel = Callable[[float, int], float | None]
"""(attained GPU-seconds, GPUs held): run time until the job's order changes (None: never)."""


@dataclass(frozen=True)
class SimPolicy:
    """One named configuration of the core, and what the simulator feeds it.

    ``next_level``: when the policy's order depends on attained service, how long a started job
    runs before its place changes; the simulator runs a cycle then so that waiting jobs above it
    can preempt it (LAS)."""

    name: str
    description: str
    core: Policy
    strategy: QueueStrategy | None = None
    oracle: bool = False
    standing: Standing = "usage"
    next_level: NextLevel | None = None
    estimates: bool = False  # jobs without a time limit plan on run times learned in the replay


POLICIES: dict[str, SimPolicy] = {
    "kiban": SimPolicy(
        "kiban",
        "the default policy: priority then FIFO within a queue, queue heads by decayed-usage "
        "fair share, reclaim/priority/fair-share preemption, EASY backfill on time limits",
        DEFAULT_POLICY,
    ),
    "fifo": SimPolicy(
        "fifo",
        "first come, first served: StrictFIFO queues, heads by submit time, no backfill, "
        "no preemption",
        Policy(preemption=False, backfill=False, admission_charge_s=0.0),
        strategy=QueueStrategy.STRICT_FIFO,
        standing="none",
    ),
    "sjf": SimPolicy(
        "sjf",
        "oracle shortest job first: the shortest remaining run time first (across queues too), "
        "no preemption, backfill on true durations",
        Policy(order_key=shortest_first, preemption=False, admission_charge_s=0.0),
        strategy=QueueStrategy.BEST_EFFORT_FIFO,
        oracle=True,
        standing="none",
    ),
    "srtf": SimPolicy(
        "srtf",
        "oracle shortest remaining time first: the least remaining run time first (across "
        "queues too); a waiting job preempts running ones with strictly more remaining time",
        Policy(
            order_key=shortest_first,
            may_preempt=srtf_may_preempt,
            admission_charge_s=0.0,
            backfill=False,
        ),
        strategy=QueueStrategy.BEST_EFFORT_FIFO,
        oracle=True,
        standing="none",
    ),
    "las": SimPolicy(
        "las",
        "Tiresias-style discretized least attained service: four queues by attained "
        "GPU-seconds (1, 2, 5 GPU-hours), first come within one; a job in a lower queue "
        "preempts running jobs in higher ones",
        Policy(
            order_key=least_attained_first,
            may_preempt=las_may_preempt,
            admission_charge_s=0.0,
            backfill=False,
        ),
        strategy=QueueStrategy.BEST_EFFORT_FIFO,
        standing="none",
        next_level=las_next_level_s,
    ),
    "recommended": SimPolicy(
        "recommended",
        "the recommended policy for research clusters: ShortestExpectedService queues (Helios' "
        "QSSF within a queue: the fewest expected GPU-seconds first, on time limits or run "
        "times estimated from the jobs that finished before), queue heads by decayed-usage "
        "fair share, reclaim/priority/fair-share preemption, EASY backfill on the same run times",
        DEFAULT_POLICY,
        strategy=QueueStrategy.SHORTEST_EXPECTED_SERVICE,
        estimates=True,
    ),
    "recommended-las": SimPolicy(
        "recommended-las",
        "the previous recommendation, kept to compare: LeastAttainedService queues (Tiresias' "
        "discretized LAS within a queue, bounded preemption) in place of recommended's "
        "ShortestExpectedService, the rest as recommended",
        DEFAULT_POLICY,
        strategy=QueueStrategy.LEAST_ATTAINED_SERVICE,
        next_level=next_level_after,
        estimates=True,
    ),
    "drf": SimPolicy(
        "drf",
        "dominant resource fairness: queue heads by their tenant's dominant share now "
        "(progressive filling), fair-share preemption of borrowers, backfill on time limits",
        Policy(admission_charge_s=1.0),  # rescaled to shares by the simulator
        strategy=QueueStrategy.BEST_EFFORT_FIFO,
        standing="share",
    ),
}


def with_oracle_runtimes(policy: SimPolicy) -> SimPolicy:
    """``policy`` told every job's true remaining run time where it would estimate one (named
    ``<name>-oracle``): beside ``policy`` itself, the cost of not knowing run times."""
    return replace(
        policy,
        name=f"{policy.name}-oracle",
        description=f"{policy.name} with oracle run times: the estimator replaced by each "
        "job's true remaining run time (what estimates cost, measured against it)",
        oracle=True,
        estimates=False,
    )


POLICIES["recommended-oracle"] = with_oracle_runtimes(POLICIES["recommended"])


def policy_named(name: str) -> SimPolicy:
    """The policy of that name; a clear error naming the others for an unknown name."""
    if name in POLICIES:
        return POLICIES[name]
    raise ValueError(f"unknown policy {name!r}; the policies are {', '.join(POLICIES)}")
