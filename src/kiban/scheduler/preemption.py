"""Who may be preempted for a waiting job, in what order, and whether it would then fit.

Three grounds, each one-directional so that two jobs can never preempt each other back and forth:

- priority: in the job's own queue, a lower-priority job, if the job's class may preempt;
- reclaim: in the job's cohort, a job of a queue that borrows the flavor, when the job's queue
  stays within its nominal quota (the lender takes back what it lent);
- fair share: in the cohort, a job of a borrowing queue whose tenant's standing is higher than
  the preemptor tenant's standing *after* admission.

A job is also never a victim of the job it preempted last, whatever the ground. Victims are
tried in the order that loses the least: lower priority first, borrowed before
nominal, the least work since the last checkpoint, then the most recently started. A job
inside its class's minRuntime is never a victim. Victims are taken greedily in that order until
the job fits quota and placement together; if it never fits, nobody is preempted.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiban.scheduler.cycle import Cycle
from kiban.scheduler.placement import gang_gpus
from kiban.scheduler.snapshot import PendingJob, RunningJob


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """The victims that make room for the job on one flavor, and on what ground each."""

    flavor: str
    victims: tuple[tuple[RunningJob, str], ...]


def victim_order(job: RunningJob, borrowing: bool, now: float) -> tuple[float | int | str, ...]:
    """Sort key of victims: least loss first."""
    progress = job.last_progress_at if job.last_progress_at is not None else job.started_at
    return (job.priority, 0 if borrowing else 1, now - progress, -job.started_at, job.id)


def candidates(cycle: Cycle, job: PendingJob, flavor: str) -> list[tuple[RunningJob, str]]:
    """Running jobs that may be preempted for ``job`` on ``flavor``, each with its ground."""
    queue = cycle.queues[job.queue]
    now = cycle.snapshot.now
    nominal = cycle.quota.nominal(job.queue, flavor)
    within_nominal = (
        nominal is not None and cycle.quota.used(job.queue, flavor) + job.total_gpus <= nominal
    )
    standing_after = cycle.standing(job.tenant) + cycle.charge(job)
    found: list[tuple[tuple[float | int | str, ...], RunningJob, str]] = []
    for victim in cycle.running_on(flavor):
        if victim.id in cycle.victims or victim.stopping or victim.preempted_by is not None:
            continue
        if victim.id == job.preempted_by:
            continue
        if now < victim.protected_until:
            continue
        borrowing = cycle.quota.borrowed(victim.queue, flavor) > 0
        if victim.queue == job.queue:
            if job.preempts and victim.priority < job.priority:
                found.append((victim_order(victim, borrowing, now), victim, "priority"))
            continue
        victim_queue = cycle.queues.get(victim.queue)
        if victim_queue is None or queue.cohort is None or victim_queue.cohort != queue.cohort:
            continue
        if not borrowing:
            continue
        if within_nominal:
            found.append((victim_order(victim, borrowing, now), victim, "reclaim"))
        elif standing_after < cycle.standing(victim.tenant):
            found.append((victim_order(victim, borrowing, now), victim, "fair-share"))
    found.sort(key=lambda item: item[0])
    return [(victim, ground) for _key, victim, ground in found]


def find_victims(cycle: Cycle, job: PendingJob, flavor: str) -> VictimChoice | None:
    """The fewest victims, in loss order, after whose stop the job fits; None if none do."""
    ordered = candidates(cycle, job, flavor)
    if not ordered:
        return None
    overlay = cycle.overlays[flavor]
    needed = gang_gpus(job)
    chosen: list[tuple[RunningJob, str]] = []
    given_quota: list[tuple[str, int]] = []
    try:
        with overlay.transaction():  # every give below is undone on exit
            for victim, ground in ordered:
                if ground != "priority" and cycle.quota.borrowed(victim.queue, flavor) <= 0:
                    continue  # its queue gave back all it borrowed: the rest is its own
                chosen.append((victim, ground))
                for replica in victim.replicas:
                    overlay.give(replica.node, replica.gpu_ids, replica.cpu_millis, replica.memory)
                gpus = victim.flavor_gpus.get(flavor, 0)
                cycle.quota.give(victim.queue, flavor, gpus)
                given_quota.append((victim.queue, gpus))
                if overlay.total_free_gpus() < needed:
                    continue
                if not cycle.quota.check(job.queue, flavor, job.total_gpus).fits:
                    continue
                attempt = cycle.try_place(job, flavor)
                if attempt.fits:
                    return VictimChoice(flavor, tuple(chosen))
    finally:
        for queue, gpus in given_quota:
            cycle.quota.take(queue, flavor, gpus)
    return None
