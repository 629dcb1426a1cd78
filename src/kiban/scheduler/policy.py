"""The core's extension points and knobs. Policy grows here rather than in the cycle.

``order_key`` sorts the pending jobs of one queue: lower keys are considered first. The default
is priority (higher first), then submit time, then submission sequence, then id, so that the
order is total and deterministic. Across queues the core interleaves queue heads by their
tenant's fair-share standing (see ``core``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiban.scheduler.snapshot import PendingJob, RunningJob

OrderKey = Callable[[PendingJob], tuple[float | int | str, ...]]
MayPreempt = Callable[[PendingJob, RunningJob, float], bool]
"""(waiting job, running job, now): whether the first may preempt the second on the policy's
own ground; it must never hold both ways for two jobs at one time."""


def priority_then_fifo(job: PendingJob) -> tuple[float | int | str, ...]:
    """Higher priority first, then first come, first served."""
    return (-job.priority, job.submitted_at, job.sequence, job.id)


@dataclass(frozen=True)
class Policy:
    """How the core orders, reserves and preempts; placement is best-fit, gangs all-or-nothing.

    ``admission_charge_s``: within one cycle, each GPU admitted to a tenant counts as this many
    GPU-seconds of usage in its standing, so that one cycle does not give a low-usage team
    everything before the next pass sees its new usage. ``max_reservations`` bounds the
    backfill reservations made per cycle, ``max_preemption_searches`` the victim searches.
    ``max_placements_per_cycle`` bounds the replicas one cycle places: past it the cycle
    admits no more and says so (``Decisions.more``), and the caller runs the next cycle at
    once. A backlog is then worked through in short cycles, as kube-scheduler (one pod per
    cycle) and Kueue (one head per queue) do, so a change such as a cancellation or an urgent
    job is seen within one short cycle rather than after a long one (None: no bound).
    ``may_preempt`` adds a preemption ground of the policy's own, across queues (the
    simulator's SRTF and LAS baselines).
    """

    order_key: OrderKey = priority_then_fifo
    admission_charge_s: float = 3600.0
    max_reservations: int = 16
    max_preemption_searches: int = 16
    max_placements_per_cycle: int | None = 2048
    may_preempt: MayPreempt | None = None
    preemption: bool = True
    backfill: bool = True


DEFAULT_POLICY = Policy()
