"""Reservations for waiting gangs and the EASY backfill rule that protects them.

When a job cannot start for lack of free capacity, it gets a reservation at the earliest time
the running jobs' ``maxRuntime`` frees enough of its flavor for it: the gang is placed, in a
what-if, on the capacity as it will be then. Later jobs in the cycle may use the reserved
nodes only if they end before the reservation starts (EASY backfill, Lifka 1995; Slurm's
backfill scheduler works the same way), so big gangs do not starve behind a stream of small
jobs. Running jobs with no ``maxRuntime`` end when their estimated run time does (from
history, ``kiban.domain.runtime_estimate``), and never when they have no estimate either.
"""

from __future__ import annotations

from kiban.scheduler.cycle import Cycle, Reservation
from kiban.scheduler.placement import could_fit
from kiban.scheduler.snapshot import PendingJob


def reserve(cycle: Cycle, job: PendingJob, flavor: str) -> Reservation | None:
    """Find and record the job's reservation on ``flavor``; None if no known end frees enough."""
    if cycle.reservation_count >= cycle.policy.max_reservations:
        return None
    now = cycle.snapshot.now
    victims = cycle.victims
    ending = sorted(
        (
            (now if r.id in victims else r.expected_end, r.id, r)
            for r in cycle.running_on(flavor)
            if r.expected_end is not None or r.id in victims
        ),
        key=lambda item: (item[0], item[1]),
    )
    overlay = cycle.overlays[flavor]
    allow = cycle.reservation_filter(job.id)
    found: Reservation | None = None
    with overlay.transaction():  # the releases below are a what-if, undone on exit
        for k, (end, _id, running) in enumerate(ending):
            assert end is not None
            for replica in running.replicas:
                overlay.give(
                    replica.node,
                    replica.gpu_ids,
                    replica.cpu_millis,
                    replica.memory,
                    replica.extended,
                )
            if k + 1 < len(ending) and ending[k + 1][0] == end:
                continue  # jobs ending at the same time are released together
            if not could_fit(job, overlay):
                continue
            attempt = cycle.try_place(job, flavor, allow)
            if attempt.fits:
                nodes = frozenset(p.node for p in attempt.placements)
                found = Reservation(job.id, flavor, max(end, now), nodes)
                break
    if found is not None:
        cycle.add_reservation(found)
    return found


def may_backfill(cycle: Cycle, job: PendingJob, flavor: str) -> bool:
    """Whether the job ends before every reservation on the flavor starts."""
    first = cycle.first_reservation(flavor, job.id)
    if first is None:
        return True
    runtime = planned_runtime(job)
    return runtime is not None and cycle.snapshot.now + runtime <= first.at


def planned_runtime(job: PendingJob) -> float | None:
    """How long the job is planned to run: its maxRuntime, else its run time estimated from
    history (an estimate plans a backfill; it never limits the job). None: neither known."""
    return job.max_runtime if job.max_runtime is not None else job.estimated_runtime
