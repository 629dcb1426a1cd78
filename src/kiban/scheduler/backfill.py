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

from collections.abc import Sequence

from kiban.scheduler.cycle import Cycle, Reservation
from kiban.scheduler.placement import RoomCount
from kiban.scheduler.released import decidable, first_fit
from kiban.scheduler.snapshot import PendingJob, RunningJob


def reserve(cycle: Cycle, job: PendingJob, flavor: str) -> Reservation | None:
    """Find and record the job's reservation on ``flavor``; None if no known end frees enough.

    The running jobs end in order of their expected ends; after each end (jobs ending at the
    same time together) the gang is placed, in a what-if, on the capacity freed so far. The
    shadow time is first sought by capacity arithmetic alone (free GPUs and replica slots off
    the nodes kept for other reservations, per node as jobs end): a trial placement is made
    only at an end where the arithmetic says the gang could fit, so the reservation found is
    the one trying each end would find. A gang of one plain task is placed by arithmetic too,
    on the ends given back to its shape's room counts (``released.first_fit``: worked out once
    per capacity and shape, shared by the cycle's reservations), the overlay left untouched.
    """
    if cycle.reservation_count >= cycle.policy.max_reservations:
        return None
    ending = cycle.ending_on(flavor)
    overlay = cycle.overlays[flavor]
    # The job may not use nodes kept for other reservations: their free GPUs do not count in
    # the capacity arithmetic that spares trial placements doomed to fail.
    kept = cycle.reserved_for_others(job.id)
    task = decidable(job)
    if task is None:
        found = _reserve_by_placing(cycle, job, flavor, ending, RoomCount(job, overlay, kept))
    else:
        fit = first_fit(
            job,
            task,
            overlay,
            kept,
            cycle.snapshot.topology_levels,
            cycle.room_memos.setdefault(flavor, {}),
            cycle.end_groups(flavor),
        )
        found = None
        if fit is not None:
            found = Reservation(job.id, flavor, max(fit[0], cycle.snapshot.now), fit[1])
    if found is not None:
        cycle.add_reservation(found)
    return found


def _reserve_by_placing(
    cycle: Cycle,
    job: PendingJob,
    flavor: str,
    ending: Sequence[tuple[float, RunningJob]],
    room: RoomCount,
) -> Reservation | None:
    """``reserve``'s search with trial placements on the overlay: at an end where ``room``
    says the gang could fit, every earlier end is given back first, then the gang placed."""
    overlay = cycle.overlays[flavor]
    allow = cycle.reservation_filter(job.id)
    given = 0  # the ends given back to the overlay so far (for a trial placement)
    with overlay.transaction():  # the releases below are a what-if, undone on exit
        for k, (end, running) in enumerate(ending):
            for replica in running.replicas:
                room.change(replica.node, len(replica.gpu_ids))
            if k + 1 < len(ending) and ending[k + 1][0] == end:
                continue  # jobs ending at the same time are released together
            if not room.fits():
                continue
            for _end, ended in ending[given : k + 1]:
                for replica in ended.replicas:
                    overlay.give(
                        replica.node,
                        replica.gpu_ids,
                        replica.cpu_millis,
                        replica.memory,
                        replica.extended,
                    )
            given = k + 1
            attempt = cycle.try_place(job, flavor, allow)
            if attempt.fits:
                nodes = frozenset(p.node for p in attempt.placements)
                return Reservation(job.id, flavor, max(end, cycle.snapshot.now), nodes)
    return None


def may_backfill(cycle: Cycle, job: PendingJob, flavor: str) -> bool:
    """Whether the job ends before every reservation on the flavor starts."""
    first = cycle.first_reservation(flavor, job.id)
    return backfills(cycle, job, (None if first is None else first.at,))[0]


def backfills(cycle: Cycle, job: PendingJob, firsts: Sequence[float | None]) -> tuple[bool, ...]:
    """``may_backfill`` before each of these first reservations' starts (None: none)."""
    runtime = planned_runtime(job)
    if runtime is None:
        return tuple(at is None for at in firsts)
    end = cycle.snapshot.now + runtime
    return tuple(at is None or end <= at for at in firsts)


def planned_runtime(job: PendingJob) -> float | None:
    """How long the job is planned to run: its maxRuntime, else its run time estimated from
    history (an estimate plans a backfill; it never limits the job). None: neither known."""
    return job.max_runtime if job.max_runtime is not None else job.estimated_runtime
