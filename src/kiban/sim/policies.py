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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from kiban.scheduler.policy import DEFAULT_POLICY, Policy
from kiban.scheduler.snapshot import PendingJob, QueueStrategy

Standing = Literal["usage", "share", "none"]


def shortest_first(job: PendingJob) -> tuple[float | int | str, ...]:
    """Higher priority first, then the least (remaining) run time, then first come."""
    remaining = job.max_runtime if job.max_runtime is not None else math.inf
    return (-job.priority, remaining, job.submitted_at, job.sequence, job.id)


@dataclass(frozen=True)
class SimPolicy:
    """One named configuration of the core, and what the simulator feeds it."""

    name: str
    description: str
    core: Policy
    strategy: QueueStrategy | None = None
    oracle: bool = False
    standing: Standing = "usage"


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
    "drf": SimPolicy(
        "drf",
        "dominant resource fairness: queue heads by their tenant's dominant share now "
        "(progressive filling), fair-share preemption of borrowers, backfill on time limits",
        Policy(admission_charge_s=1.0),  # rescaled to shares by the simulator
        strategy=QueueStrategy.BEST_EFFORT_FIFO,
        standing="share",
    ),
}

NEEDS_CORE_HOOK = {
    "srtf": "oracle shortest remaining time first needs a preemption ground the core lacks "
    "(a running job with more remaining time than a waiting one may be preempted)",
    "las": "Tiresias-style discretized least attained service needs an order and a preemption "
    "ground on attained service that the core lacks",
}


def policy_named(name: str) -> SimPolicy:
    """The policy of that name; a clear error for unknown names and those not yet possible."""
    if name in POLICIES:
        return POLICIES[name]
    if name in NEEDS_CORE_HOOK:
        raise ValueError(f"policy {name} is not available yet: {NEEDS_CORE_HOOK[name]}")
    known = ", ".join([*POLICIES, *NEEDS_CORE_HOOK])
    raise ValueError(f"unknown policy {name!r}; the policies are {known}")
