"""Who may be preempted for a waiting job, in what order, and whether it would then fit.

Four grounds (``PreemptionGround``), each one-directional so that two jobs can never preempt
each other back and forth:

- scavenger: a job of a ``scavenger`` queue, for any waiting job of any other queue, whatever
  its priority, queue or cohort; tried before every other ground. Scavenger jobs use idle
  capacity only: they never preempt, on any ground, and hold no backfill reservation;
- priority: in the job's own queue, a lower-priority job, if the job's class may preempt;
- reclaim: in the job's cohort, a job of a queue that borrows the flavor, when the job's queue
  stays within its nominal quota (the lender takes back what it lent);
- fair share: in the cohort, a job of a borrowing queue whose tenant's standing is higher than
  the preemptor tenant's standing *after* admission; within one tenant, a teammate's job
  whose member standing is higher than the preemptor member's after admission (``fair_tree``).

A policy may add a fifth ground, ``order`` (``Policy.may_preempt``): any running job for which
its predicate holds, such as a job with more remaining work for shortest-remaining-time-first;
the predicate must be one-way, as these are.

A job is also never a victim of the job it preempted last, whatever the ground, and a job
back in its queue after a preemption does not preempt on the fair-share ground (it may reclaim
its own quota or preempt by priority): otherwise one reclaim cascades through the cohort, each
borrower stopped passing the loss on to the next, round after round. Victims are
tried in the order that loses the least: scavenger jobs first, then lower priority, borrowed before
nominal, the least work since the last checkpoint, then the most recently started. A job
inside its class's minRuntime is never a victim. Victims are taken greedily in that order until
the job fits quota and placement together; if it never fits, nobody is preempted.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from kiban.scheduler.capacity import NodeFilter
from kiban.scheduler.cycle import Cycle, loss_order
from kiban.scheduler.fair_tree import FairTree
from kiban.scheduler.order_ground import ThresholdGround, ThresholdIndex
from kiban.scheduler.placement import (
    GangAttempt,
    RoomCount,
    could_fit,
    gang_gpus,
)
from kiban.scheduler.snapshot import Extended, PendingJob, RunningJob
from kiban.scheduler.victim_sources import (
    COHORT_GROUNDS,
    PreemptionGround,
    Source,
    could_free,
    could_hold,
    members_tree,
    sources_for,
)


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """The victims that make room for the job on one flavor, and on what ground each."""

    flavor: str
    victims: tuple[tuple[RunningJob, PreemptionGround], ...]
    nodes: frozenset[str]  # where the job would start once they stop


Candidate = tuple[RunningJob, PreemptionGround]
_FIRST, _THEN = 0, 1  # the scavenger ground's victims come before every other ground's


_Keyed = Iterator[tuple[tuple[float | int | str, ...], Candidate]]


@dataclass(slots=True)
class _Groups:
    """A search's per-queue candidate lists before the merge, and what the merge reads."""

    groups: list[_Keyed]
    gpus: int  # at most this many GPUs are held by their jobs (each counted once a list)
    tree: FairTree
    standing_after: float  # the preemptor tenant's standing once the job is admitted
    # When every list is a threshold ground's: each one's queue and where its levels above the
    # job's bound begin (what the lists hold follows from them); None: some list is not.
    thresholds: list[tuple[str, int]] | None = None


def candidates(
    cycle: Cycle, job: PendingJob, flavor: str, gathered: _Groups | None = None
) -> Iterator[Candidate]:
    """Running jobs that may be preempted for ``job`` on ``flavor``, each with its ground, least
    loss first: lower priority, borrowed before nominal, least work since the last checkpoint,
    most recently started. Lazily merged from per-queue lists, so that a search which finds
    room after a few victims does not visit the cluster's every running job. Jobs of scavenger
    queues come first, and a scavenger queue's job has none. ``gathered``: the lists, if the
    caller gathered them already (``_gather``)."""
    if gathered is None:
        gathered = _gather(cycle, job, flavor)
        if gathered is None:
            return
    now = cycle.snapshot.now
    tree, standing_after = gathered.tree, gathered.standing_after
    groups = gathered.groups
    merged = groups[0] if len(groups) == 1 else heapq.merge(*groups, key=lambda item: item[0])
    seen: set[str] = set()
    taken = cycle.victims
    for _key, (victim, ground) in merged:
        if victim.id in seen or victim.id in taken:
            continue
        if ground is not PreemptionGround.ORDER and _never_for(job, victim, now):
            continue  # (the order ground's groups leave such victims out themselves)
        if ground is PreemptionGround.FAIR_SHARE and not tree.outranks(
            job, standing_after, victim, cycle.standing(victim.tenant)
        ):
            continue
        seen.add(victim.id)
        yield victim, ground


def _gather(
    cycle: Cycle, job: PendingJob, flavor: str, sources: list[Source] | None = None
) -> _Groups | None:
    """The per-queue lists of ``candidates`` (None for a scavenger queue's job), built lazily:
    each list reads its queue's jobs, and the quota, only when the merge first asks it.
    ``sources``: what ``sources_for`` says of the job now, if the caller asked it already."""
    queue = cycle.queues[job.queue]
    if queue.scavenger:
        return None
    if sources is None:
        sources = sources_for(cycle, job, queue, flavor)
    now = cycle.snapshot.now
    standing_after = cycle.standing(job.tenant) + cycle.charge(job)
    tree = members_tree(cycle)  # members (second level)
    groups: list[_Keyed] = []
    gpus = 0
    for name, ground, borrows, below in sources:
        groups.append(_group(cycle, name, flavor, ground, borrows, now, below))
        gpus += _gpus_in(cycle, name, flavor)
    may_preempt = cycle.policy.may_preempt
    thresholds: list[tuple[str, int]] | None = (
        [] if isinstance(may_preempt, ThresholdGround) and not sources else None
    )
    if may_preempt is not None:
        # Only its own queue's jobs, and borrowers of its cohort, can make room within its quota
        # (a queue without quota may take room anywhere).
        if isinstance(may_preempt, ThresholdGround) and not may_preempt.across(job.queue):
            names = [job.queue]  # of the names below, the only one its partition holds
        elif queue.nominal is None:
            names = sorted(cycle.queues)
        else:
            names = [job.queue]
            if queue.cohort is not None:
                names += [
                    q.name
                    for q in cycle.cohort_members(queue.cohort)
                    if q.name != job.queue and cycle.quota.borrowed(q.name, flavor) > 0
                ]
        ground = PreemptionGround.ORDER
        if isinstance(may_preempt, ThresholdGround):
            for name in names:
                if not may_preempt.in_scope(job.queue, name):
                    continue
                index = _threshold_index(cycle, may_preempt, name, flavor)
                borrows = cycle.quota.borrowed(name, flavor) > 0
                first = index.first(may_preempt, job)
                groups.append(_by_threshold(index, first, job, borrows, now))
                gpus += index.gpus_from[first]
                if thresholds is not None:
                    thresholds.append((name, first))
        else:
            predicate = may_preempt
            thresholds = None

            def allowed(victim: RunningJob) -> bool:
                return not _never_for(job, victim, now) and predicate(job, victim, now)

            for name in names:
                borrows = cycle.quota.borrowed(name, flavor) > 0
                groups.append(_group(cycle, name, flavor, ground, borrows, now, keep=allowed))
                gpus += _gpus_in(cycle, name, flavor)
    return _Groups(groups, gpus, tree, standing_after, thresholds)


def _gpus_in(cycle: Cycle, queue: str, flavor: str) -> int:
    """GPUs held by the queue's running jobs of the flavor (summed once a cycle)."""
    return cycle.once_a_cycle(
        (_gpus_in, queue, flavor),
        lambda: sum(victim.gpus for victim in cycle.running_in(queue, flavor)),
    )


def _never_for(job: PendingJob, victim: RunningJob, now: float) -> bool:
    """Whether the victim may not be preempted for the job on any ground: it is stopping or
    back from a preemption's stop not yet seen, it is the job that preempted the job last, or
    it is inside its minRuntime (facts of the two jobs alone)."""
    return victim.id == job.preempted_by or not victim.stoppable_at(now)


def _group(
    cycle: Cycle,
    queue: str,
    flavor: str,
    ground: PreemptionGround,
    borrowing: bool,
    now: float,
    below: int = 0,
    keep: Callable[[RunningJob], bool] | None = None,
) -> Iterator[tuple[tuple[float | int | str, ...], Candidate]]:
    """One queue's candidates: on the priority ground those below the preemptor's priority; on
    a cohort ground only while the queue still borrows (the search gives back its victims'
    quota as it goes); on the scavenger ground all of them, ahead of every other ground's.

    ``keep`` (the order ground's): only the victims it admits. The policy's predicate reads the
    two jobs and the time alone, so asking it here, before the merge, yields what asking it
    after the merge would; in a contended LAS or SRTF replay most running jobs fail it, and
    they no longer pass through the merge and its keys for each search."""
    if ground is PreemptionGround.PRIORITY:
        lowest = cycle.lowest_priority(queue)
        if lowest is None or lowest >= below:
            return
    rank = _FIRST if ground is PreemptionGround.SCAVENGER else _THEN
    for victim in cycle.running_in(queue, flavor):  # lowest priority first
        if ground is PreemptionGround.PRIORITY and victim.priority >= below:
            return
        if ground in COHORT_GROUNDS and cycle.quota.borrowed(queue, flavor) <= 0:
            return
        if keep is not None and not keep(victim):
            continue
        yield _merge_key(rank, victim, borrowing, now), (victim, ground)


def _merge_key(
    rank: int, victim: RunningJob, borrowing: bool, now: float
) -> tuple[float | int | str, ...]:
    """Where a candidate comes in the merge of the lists: scavengers' first (``rank``), then
    by priority, borrowing queues' jobs before the others', then the rest of the loss order."""
    loss = loss_order(victim, now)
    return (rank, loss[0], 0 if borrowing else 1, *loss[1:])


def _threshold_index(
    cycle: Cycle, ground: ThresholdGround, queue: str, flavor: str
) -> ThresholdIndex:
    """The queue's running jobs of the flavor sorted by the ground's level (once a cycle)."""
    return cycle.once_a_cycle(
        (ThresholdIndex, ground, queue, flavor),
        lambda: ThresholdIndex.of(ground, cycle.running_in(queue, flavor), cycle.snapshot.now),
    )


def _by_threshold(
    index: ThresholdIndex, first: int, job: PendingJob, borrowing: bool, now: float
) -> _Keyed:
    """One queue's candidates on a threshold-shaped order ground: what ``_group`` yields with
    the ground as its ``keep``, found by bisecting the queue's running jobs sorted by level
    (``ThresholdIndex``) instead of asking the ground of each of them; ``first``: where the
    levels above the job's bound begin (``ThresholdIndex.first``)."""
    for victim in index.victims(first, job):
        yield _merge_key(_THEN, victim, borrowing, now), (victim, PreemptionGround.ORDER)


def find_victims(cycle: Cycle, job: PendingJob, flavor: str) -> VictimChoice | None:
    """The victims, taken in loss order until the job fits quota and placement (off nodes kept
    for others), then pruned: a victim without whom it still fits is spared. None if it never
    fits.

    Each victim's GPUs are first counted free by arithmetic (``RoomCount``); the victims
    counted so far are given back to the overlay, and the gang's quota and placement tried,
    only once that count says the gang could fit (the check ``_fit`` starts with).

    Most searches find nobody (more than 199 in 200 in a contended replay of the default
    policy). Off the order ground they are refused before any list is gathered: when no job
    of the grounds' queues may still be stopped, when those jobs (a borrower's up to what it
    borrows) hold too few GPUs, or when no node could hold a replica even with all of them
    stopped (``could_free``, ``could_hold``, on sums kept across the cycle's searches). On a
    threshold ground (SRTF, LAS) a search that failed is kept for the rest of the cycle under
    what it read (``_job_key``, ``_search_key``), and a like one later is answered from it."""
    early = _job_key(cycle, job, flavor)
    if early is None:  # not a threshold ground: nothing is kept
        return _refuse_or_search(cycle, job, flavor)
    failed = cycle.once_a_cycle(_search_key, set[tuple[object, ...]])
    state = cycle.judging_state()
    if (early, state) in failed:
        return None
    gathered = _gather(cycle, job, flavor)  # (it changes nothing ``judging_state`` reads)
    if gathered is None:
        return None
    lists = _search_key(cycle, job, flavor, gathered)
    if lists is None:
        return _search(cycle, job, flavor, gathered)
    if (lists, state) in failed:
        return None
    choice = _search(cycle, job, flavor, gathered)
    if choice is None:  # kept as the cycle stands before and after it (its what-ifs undone)
        after = cycle.judging_state()
        failed.add((lists, state))
        failed.add((lists, after))
        if early[0] == "job":
            failed.add((early, state))
            failed.add((early, after))
    return choice


def _search_key(
    cycle: Cycle, job: PendingJob, flavor: str, gathered: _Groups
) -> tuple[object, ...] | None:
    """What a search whose lists are all a threshold ground's depends on besides the cycle's
    quota use, victims, reservations and free capacity (``Cycle.judging_state``), for the
    failures kept within a cycle (None: some list is not). Its lists follow from the queues'
    names and ``ThresholdIndex.first`` with the job's priority and last preemptor; its walk
    from the nodes kept from the job and the gang's shape. Under SRTF or LAS most waiting jobs
    of a queue search for the same victims, search after search, and find none."""
    thresholds = gathered.thresholds
    if thresholds is None:
        return None
    return (
        "lists",
        flavor,
        job.queue,
        job.shape,
        job.priority,
        job.preempted_by,
        tuple(thresholds),
        _kept_from(cycle, job),
    )


def _job_key(cycle: Cycle, job: PendingJob, flavor: str) -> tuple[object, ...] | None:
    """What ``_gather`` and the walk read of the job and the cycle besides
    ``Cycle.judging_state``, when the policy's ground is a threshold and admissions charge no
    standing (SRTF, LAS: then no standing changes within the cycle): a failure kept under it
    answers a later search before its lists are gathered. ``("none",)`` under a threshold
    ground with a charge (only ``_search_key`` keeps failures); None: not a threshold ground.
    A partitioned ground's job of a queue with quota is known by where its bound falls in its
    queue's index (as in ``_search_key``), any other by its bound."""
    policy = cycle.policy
    ground = policy.may_preempt
    if not isinstance(ground, ThresholdGround):
        return None
    if policy.admission_charge_s != 0:
        return ("none",)
    queue = cycle.queues.get(job.queue)
    bound: object = ground.bound(job)
    if queue is not None and queue.nominal is not None and not ground.across(job.queue):
        bound = _threshold_index(cycle, ground, job.queue, flavor).first(ground, job)
    return (
        "job",
        flavor,
        job.queue,
        job.shape,
        job.priority,
        job.preempted_by,
        job.preempts,
        job.tenant,
        job.member,
        bound,
        _kept_from(cycle, job),
    )


def _kept_from(cycle: Cycle, job: PendingJob) -> tuple[str, ...]:
    """The nodes kept for other jobs' reservations (what keeps the job off them)."""
    return tuple(cycle.reserved_for_others(job.id)) if cycle.reservation_count else ()


def _refuse_or_search(cycle: Cycle, job: PendingJob, flavor: str) -> VictimChoice | None:
    """``find_victims`` off a threshold ground: refused by arithmetic before the lists are
    gathered where it can be (``could_free``, ``could_hold``), else gathered and walked."""
    queue = cycle.queues[job.queue]
    if queue.scavenger:
        return None
    overlay = cycle.overlays[flavor]
    free, needed = overlay.total_free_gpus(), gang_gpus(job)
    sources = sources_for(cycle, job, queue, flavor)
    if cycle.policy.may_preempt is None:  # (the order ground's lists are summed as gathered)
        jobs, held = could_free(cycle, sources, flavor)
        if not jobs or free + held < needed:
            return None  # no victim to find, or too few GPUs among them: spare the gathering
        if not could_hold(cycle, job, sources, flavor):
            return None  # not even with all of them stopped: no node frees enough for a replica
    gathered = _gather(cycle, job, flavor, sources)
    return None if gathered is None else _search(cycle, job, flavor, gathered)


def _search(cycle: Cycle, job: PendingJob, flavor: str, gathered: _Groups) -> VictimChoice | None:
    """``find_victims``' walk over the candidate lists ``gathered``."""
    overlay = cycle.overlays[flavor]
    if overlay.total_free_gpus() + gathered.gpus < gang_gpus(job):
        return None  # stopping every candidate would not free enough GPUs: spare the walk
    ordered = candidates(cycle, job, flavor, gathered)
    allow = cycle.reservation_filter(job.id)
    # Nodes kept for other jobs' reservations: the job may not use them, so their free GPUs
    # do not count in the capacity arithmetic that spares placements doomed to fail.
    kept = tuple(n for n in cycle.reserved_for_others(job.id) if overlay.schedules(n))
    room = RoomCount(job, overlay, kept)
    chosen: list[Candidate] = []
    counted: list[RunningJob] = []  # released in the count and the quota, not on the overlay yet
    # every give below is a what-if: both transactions undo it on exit
    with overlay.transaction(), cycle.quota.transaction():
        for victim, ground in ordered:
            if ground in COHORT_GROUNDS and cycle.quota.borrowed(victim.queue, flavor) <= 0:
                continue  # its queue gave back all it borrowed: the rest is its own
            chosen.append((victim, ground))
            _release_quota(cycle, victim, flavor)
            for replica in victim.replicas:
                room.change(replica.node, len(replica.gpu_ids))
            counted.append(victim)
            if not room.fits():
                continue
            for released in counted:
                _release_capacity(cycle, released, flavor)
            counted.clear()
            attempt = _fit(cycle, job, flavor, allow, kept, counted=True)
            if attempt is not None:
                attempt = _spare_the_unneeded(cycle, job, flavor, allow, kept, chosen, attempt)
                nodes = frozenset(p.node for p in attempt.placements)
                return VictimChoice(flavor, tuple(chosen), nodes)
    return None


def _release_capacity(cycle: Cycle, victim: RunningJob, flavor: str) -> None:
    """What-if: the victim's GPUs, CPU and memory are free on its nodes."""
    for replica in victim.replicas:
        cycle.overlays[flavor].give(
            replica.node, replica.gpu_ids, replica.cpu_millis, replica.memory, replica.extended
        )


def _release_quota(cycle: Cycle, victim: RunningJob, flavor: str) -> None:
    """What-if: the victim's quota is given back to its queue."""
    cycle.quota.give(victim.queue, flavor, victim.flavor_gpus.get(flavor, 0))
    if victim.flavor_extended:
        cycle.quota.give_extended(victim.queue, flavor, _extended(victim, flavor))


def _extended(victim: RunningJob, flavor: str) -> Extended:
    """The extended resources the victim counts against its queue's quota of the flavor."""
    return victim.flavor_extended.get(flavor, ()) if victim.flavor_extended else ()


def _fit(
    cycle: Cycle,
    job: PendingJob,
    flavor: str,
    allow: NodeFilter | None,
    kept: Sequence[str] = (),
    *,
    counted: bool = False,
) -> GangAttempt | None:
    """Where the job would go now (quota and placement, off the ``kept`` nodes that ``allow``
    keeps it off), without taking anything. ``counted``: a ``RoomCount`` of the overlay as it
    is already says the gang could fit, so ``could_fit`` is not asked again."""
    overlay = cycle.overlays[flavor]
    if not counted and not could_fit(job, overlay, kept):
        return None
    if not cycle.quota.check(job.queue, flavor, job.total_gpus).fits:
        return None
    extended = job.total_extended
    if extended and not cycle.quota.check_extended(job.queue, flavor, extended).fits:
        return None
    with overlay.transaction():  # the placement is a what-if too: undone on exit
        attempt = cycle.try_place(job, flavor, allow)
    return attempt if attempt.fits else None


def _spare_the_unneeded(
    cycle: Cycle,
    job: PendingJob,
    flavor: str,
    allow: NodeFilter | None,
    kept: Sequence[str],
    chosen: list[Candidate],
    attempt: GangAttempt,
) -> GangAttempt:
    """Give each chosen victim back, the last but one first, while the job still fits; the
    last was needed. Least-loss order alone may pick jobs on nodes the gang never uses.
    ``attempt``: where the job fits with every chosen victim stopped."""
    overlay = cycle.overlays[flavor]
    room = RoomCount(job, overlay, kept)  # every chosen victim's capacity is free in it
    for k in range(len(chosen) - 2, -1, -1):
        victim, _ground = chosen[k]
        for replica in victim.replicas:
            room.change(replica.node, -len(replica.gpu_ids))
        if not room.fits():  # needed: without it the gang could not fit (``_fit``'s first check)
            for replica in victim.replicas:
                room.change(replica.node, len(replica.gpu_ids))
            continue
        with overlay.transaction() as tx, cycle.quota.transaction() as quota_tx:
            for replica in victim.replicas:
                overlay.take_ids(
                    replica.node,
                    replica.gpu_ids,
                    replica.cpu_millis,
                    replica.memory,
                    replica.extended,
                )
            cycle.quota.take(victim.queue, flavor, victim.flavor_gpus.get(flavor, 0))
            cycle.quota.take_extended(victim.queue, flavor, _extended(victim, flavor))
            without = _fit(cycle, job, flavor, allow, kept, counted=True)
            if without is None:
                for replica in victim.replicas:
                    room.change(replica.node, len(replica.gpu_ids))
                continue  # needed: the transactions give its capacity and quota back on exit
            tx.commit()
            quota_tx.commit()
        del chosen[k]
        attempt = without
    return attempt
