"""Where a victim search may take its victims from, and whether they could make room at all.

The grounds (``PreemptionGround``) and, for a waiting job, the queues a search takes victims
from on the scavenger, priority, reclaim and fair-share grounds (``sources_for``), with what
those queues' stoppable jobs could free (``could_free``, ``could_hold``) on sums kept across a
cycle's searches: most searches find nobody, and these let ``preemption.find_victims`` refuse
them before it gathers and merges any candidate list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from kiban.scheduler.cycle import Cycle
from kiban.scheduler.fair_tree import FairTree
from kiban.scheduler.placement import replica_demands
from kiban.scheduler.snapshot import PendingJob, QueueView


class PreemptionGround(StrEnum):
    """On what ground a running job is preempted (a preemption's ``ground`` detail)."""

    SCAVENGER = "scavenger"  # its queue runs on idle capacity only: any waiting job may have it
    PRIORITY = "priority"  # lower priority in the preemptor's own queue
    RECLAIM = "reclaim"  # its queue borrows what the preemptor's queue lent
    FAIR_SHARE = "fair-share"  # its tenant (or member) stands above the preemptor's
    ORDER = "order"  # the policy's own ground (``Policy.may_preempt``)


COHORT_GROUNDS = (PreemptionGround.RECLAIM, PreemptionGround.FAIR_SHARE)  # while they borrow


Source = tuple[str, PreemptionGround, bool, int]
"""A queue whose running jobs may be a search's victims: its name, the ground, whether it
borrows the flavor (its jobs come first in the merge), the preemptor's priority (on the
priority ground: only jobs below it)."""


def sources_for(cycle: Cycle, job: PendingJob, queue: QueueView, flavor: str) -> list[Source]:
    """The queues a search for ``job`` (of ``queue``, not a scavenger queue) takes victims from
    on the scavenger, priority, reclaim and fair-share grounds, in merge order; cheap to ask
    (the cohort's borrowers are kept while the quota stays), so that a search with no victim
    to find, or too few GPUs among them, is refused before its lists are gathered."""
    sources: list[Source] = []
    borrowed = cycle.quota.borrowed
    for other in cycle.scavenger_queues():
        sources.append(
            (other.name, PreemptionGround.SCAVENGER, borrowed(other.name, flavor) > 0, 0)
        )
    if job.preempts:
        lowest = cycle.lowest_priority(job.queue)
        if lowest is not None and lowest < job.priority:  # else none is below it
            own_borrows = borrowed(job.queue, flavor) > 0
            sources.append((job.queue, PreemptionGround.PRIORITY, own_borrows, job.priority))
    if queue.cohort is None:
        return sources
    # (a job back from a preemption may reclaim, never preempt on fair share)
    within_nominal = stays_within_nominal(cycle, job, flavor)
    if not within_nominal and job.preempted_by is not None:
        return sources
    lenders = [q for q in borrowers(cycle, queue.cohort, flavor) if q.name != job.queue]
    if within_nominal:
        sources += [(q.name, PreemptionGround.RECLAIM, True, 0) for q in lenders]
    elif lenders:
        standing_after = cycle.standing(job.tenant) + cycle.charge(job)
        reaches = members_tree(cycle).reaches
        sources += [
            (q.name, PreemptionGround.FAIR_SHARE, True, 0)
            for q in lenders
            if reaches(job, standing_after, q.tenant, cycle.standing(q.tenant))
        ]
    return sources


def stays_within_nominal(cycle: Cycle, job: PendingJob, flavor: str) -> bool:
    """Whether the job's queue stays within its nominal quota of the flavor once it starts."""
    nominal = cycle.quota.nominal(job.queue, flavor)
    return nominal is not None and cycle.quota.used(job.queue, flavor) + job.total_gpus <= nominal


def nominals(cycle: Cycle, cohort: str, flavor: str) -> list[tuple[QueueView, int | None]]:
    """The cohort's queues, by name, with their nominal GPUs of the flavor (once a cycle)."""
    return cycle.once_a_cycle(
        (nominals, cohort, flavor),
        lambda: [(q, cycle.quota.nominal(q.name, flavor)) for q in cycle.cohort_members(cohort)],
    )


@dataclass(slots=True)
class Kept:
    """What was found of the cycle as it stood at ``stamp`` (found again when that changes)."""

    stamp: int = -1
    queues: list[QueueView] = field(default_factory=list)
    held: int = 0
    jobs: int = 0
    largest: int = 0  # the most GPUs one of the jobs holds
    exact: bool = True  # each job's GPUs are those it counts against the quota of the flavor
    on: dict[str, int] = field(default_factory=dict)  # the GPUs the jobs hold, by node


def borrowers(cycle: Cycle, cohort: str, flavor: str) -> list[QueueView]:
    """The cohort's queues, by name, that borrow the flavor now (what ``QuotaBook.borrowed``
    > 0 says): found again only when the quota book changed since the last ask this cycle."""
    kept = cycle.once_a_cycle((borrowers, cohort, flavor), Kept)
    version = cycle.quota.version
    if kept.stamp != version:
        used = cycle.quota.used
        kept.queues = [
            q
            for q, nominal in nominals(cycle, cohort, flavor)
            if nominal is not None and used(q.name, flavor) > nominal
        ]
        kept.stamp = version
    return kept.queues


def stoppable(cycle: Cycle, queue: str, flavor: str) -> Kept:
    """How many of the queue's running jobs of the flavor may still be stopped this cycle (no
    ground forbids it now, not taken by an earlier search), and the GPUs they hold: found
    again only when the cycle's victims changed."""
    kept = cycle.once_a_cycle((stoppable, queue, flavor), Kept)
    taken = cycle.victims
    if kept.stamp != len(taken):  # (victims are only ever added)
        now = cycle.snapshot.now
        left = [
            victim
            for victim in cycle.running_in(queue, flavor)
            if victim.stoppable_at(now) and victim.id not in taken
        ]
        kept.jobs, kept.held = len(left), sum(victim.gpus for victim in left)
        kept.largest = max((victim.gpus for victim in left), default=0)
        kept.exact = all(victim.gpus == victim.flavor_gpus.get(flavor) for victim in left)
        on: dict[str, int] = {}
        for victim in left:
            for replica in victim.replicas:
                on[replica.node] = on.get(replica.node, 0) + len(replica.gpu_ids)
        kept.on = on
        kept.stamp = len(taken)
    return kept


def could_free(cycle: Cycle, sources: list[Source], flavor: str) -> tuple[int, int]:
    """How many jobs of the sources' queues a search may still stop, and at most how many GPUs
    stopping them frees. A queue taken from on a cohort ground (and no other) gives victims
    only while it borrows: once the GPUs given back reach what it borrows, it gives no more,
    so it frees less than its borrowing and its largest job together."""
    scavengers = {name for name, ground, _b, _p in sources if ground is PreemptionGround.SCAVENGER}
    jobs = held = 0
    for name, ground, _borrows, _below in sources:
        left = stoppable(cycle, name, flavor)
        jobs += left.jobs
        if ground in COHORT_GROUNDS and left.exact and name not in scavengers:
            most = cycle.quota.borrowed(name, flavor) + left.largest - 1
            held += min(left.held, most)
        else:
            held += left.held
    return jobs, held


def could_hold(cycle: Cycle, job: PendingJob, sources: list[Source], flavor: str) -> bool:
    """Whether the free GPUs, with those of every job of the sources' queues that may still be
    stopped, could hold the gang's replicas node by node (``RoomCount`` with every candidate
    counted free, reserved nodes counted too): when not, no choice of victims could make the
    gang fit, however many GPUs they hold together."""
    overlay = cycle.overlays[flavor]
    freed: dict[str, int] = {}
    for name, _ground, _borrows, _below in sources:
        for node, gpus in stoppable(cycle, name, flavor).on.items():
            freed[node] = freed.get(node, 0) + gpus
    free_gpus = overlay.free_gpus
    for gpu, cap, take in replica_demands(job):
        if gpu <= 0:
            continue
        slots = overlay.replica_slots(gpu, cap)
        for node, gpus in freed.items():
            if slots >= take:
                break
            if overlay.schedules(node):
                free = free_gpus(node)
                slots += min((free + gpus) // gpu, cap) - min(free // gpu, cap)
        if slots < take:
            return False
    return True


def members_tree(cycle: Cycle) -> FairTree:
    """The members' side of the fair share (the snapshot's, once a cycle)."""
    return cycle.once_a_cycle(
        members_tree, lambda: FairTree.of(cycle.snapshot, cycle.policy.admission_charge_s)
    )
