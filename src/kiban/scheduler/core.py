"""One scheduling cycle over an immutable snapshot. Pure: same snapshot, same decisions."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import overload

from kiban.scheduler import units
from kiban.scheduler.attained_service import with_queue_strategies
from kiban.scheduler.backfill import may_backfill, reserve
from kiban.scheduler.capacity import CapacityOverlay
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.cycle import Cycle
from kiban.scheduler.decisions import Admit, Decisions, Preempt, Wait
from kiban.scheduler.fair_tree import FairTree
from kiban.scheduler.placement import (
    GangAttempt,
    domain_could_hold,
    gang_gpus,
    task_filter,
    task_fits_some_node,
)
from kiban.scheduler.policy import DEFAULT_POLICY, OrderKey, Policy
from kiban.scheduler.preemption import find_victims
from kiban.scheduler.reasons import (
    PendingReason,
    ReasonCode,
    counted,
    extended_amount,
    gpus,
    replica_size,
    spread_phrase,
)
from kiban.scheduler.snapshot import PendingJob, QueueStrategy, QueueView, Snapshot

_KEY = itemgetter(0)


@dataclass(slots=True)
class _Waiting:
    """Why a job visited waits (the cycle numbers its positions)."""

    reason: PendingReason
    reserved_at: float | None = None


def schedule(
    snapshot: Snapshot, policy: Policy = DEFAULT_POLICY, cache: CapacityCache | None = None
) -> Decisions:
    """Decide which pending jobs start now and where, whom to preempt, and why others wait.

    ``cache`` keeps the capacity index between the calls of one caller; the decisions are the
    same with or without it.

    1. Take a scratch cycle: free capacity per flavor, quotas and cohort totals, no
       reservations yet.
    2. Order the jobs: within a queue by the policy's order (priority, then submit time);
       across queues, queue heads by their tenant's fair-share standing, lowest first, re-read
       after every admission.
    3. A job of a StrictFIFO queue whose head could not start waits behind it, unless that head
       could never start, even on idle nodes (``Unschedulable``): it holds up nobody.
    4. Try the queue's flavors in order: quota (nominal, then borrowing in the cohort), then
       placement of the whole gang (in one topology domain if asked, off other jobs'
       reservations unless it ends before them). The first flavor that fits admits the job.
    5. Otherwise, if it could never start on its queue's flavors, even with every node idle, it
       waits as ``Unschedulable`` (see ``feasibility``). Else, if victims already stop for it,
       it waits for them; else look for victims (priority, reclaim, fair share) after whose
       stop it would fit, and preempt them.
    6. Otherwise, if free capacity (not quota) is what it lacks, reserve GPUs for it at the
       earliest time the running jobs' maxRuntime frees enough.
    7. Once the cycle has placed ``max_placements_per_cycle`` replicas, the jobs after wait
       unconsidered for the next cycle, which the caller runs at once (``Decisions.more``).
    8. Number the waiting jobs within their queues and within the cluster, in the order visited
       (the jobs behind a blocked StrictFIFO head are numbered too, though the cycle does not
       visit them: see ``_Waits``; the numbers are made when ``Decisions.waiting`` is read).
    """
    policy = with_queue_strategies(policy, snapshot.queues)  # LeastAttainedService queues
    cycle = Cycle.start(snapshot, policy, cache)
    blocked: dict[str, PendingReason] = {}  # per StrictFIFO queue whose head waits: why the rest do
    admitted: list[Admit] = []
    preempted: list[Preempt] = []
    visits: list[_Visit] = []  # the jobs judged, in order; the jobs behind blocked heads are not
    budget = policy.max_placements_per_cycle
    placed = 0
    more = False

    members = FairTree.of(snapshot, policy.admission_charge_s)
    for job in _fair_order(
        snapshot, cycle.queues, policy.order_key, cycle.standing, blocked, members
    ):
        if budget is not None and placed >= budget:
            more = True
            break
        queue = cycle.queues.get(job.queue)
        if queue is None:
            visits.append(_Visit(job, _Waiting(_queue_not_found(job))))
            continue
        behind = blocked.get(queue.name)
        if behind is not None:  # a job that preempted, behind its queue's blocked head
            visits.append(_Visit(job, _Waiting(behind)))
            continue
        outcome = _admit_or_explain(cycle, job, queue, preempted)
        if isinstance(outcome, Admit):
            admitted.append(outcome)
            placed += len(outcome.placements)
            visits.append(_Visit(job, outcome, cycle.charge(job)))
            continue
        visits.append(_Visit(job, outcome))
        if (
            queue.strategy is QueueStrategy.STRICT_FIFO
            and outcome.reason.code is not ReasonCode.UNSCHEDULABLE
        ):
            # The rest of the queue waits behind it: the fair order drops the queue, and their
            # waits are written only when read (``_Waits``), for one shared reason.
            blocked[queue.name] = _blocked_by_head(queue, job.id)
    waits = _Waits(snapshot, policy, tuple(visits), more)
    if not more and blocked and budget is not None and placed >= budget:
        # Visiting each job behind a blocked head, the cycle would have stopped at the first
        # one after the budget was spent, if any came after it: the replay says.
        more = waits.over_budget()
    return Decisions(tuple(admitted), waits, tuple(preempted), more=more)


@dataclass(frozen=True, slots=True)
class _Visit:
    """A job the cycle judged: admitted (with the charge to its tenant's standing) or waiting."""

    job: PendingJob
    outcome: Admit | _Waiting
    charge: float = 0.0


class _Waits(Sequence[Wait]):
    """The cycle's waits, numbered in the order the cycle visits the waiting, made when first read.

    The cycle judges only the jobs it must: the jobs behind a StrictFIFO queue's blocked head
    are not visited one by one (in a contended cluster they are most of the backlog, and a
    cycle that explained each of them cost as much as the backlog is long). Their wait, the
    same ``BlockedByQueueHead`` for all, and every job's positions are found here, by replaying
    the fair order over all the pending jobs with the judged jobs' outcomes: the same waits,
    positions and reasons as visiting each job, paid for only by a reader (the control loop
    records them; the simulator reads only the few it needs).
    """

    __slots__ = ("_made", "_more", "_policy", "_snapshot", "_visits")

    def __init__(
        self, snapshot: Snapshot, policy: Policy, visits: tuple[_Visit, ...], more: bool
    ) -> None:
        self._snapshot = snapshot
        self._policy = policy
        self._visits = visits
        self._more = more
        self._made: tuple[Wait, ...] | None = None

    def judged(self) -> Iterator[tuple[str, PendingReason]]:
        """(job id, reason) of the waiting jobs the cycle judged itself, without numbering
        them: preemptors and queue heads, never the jobs behind a blocked head."""
        for visit in self._visits:
            if isinstance(visit.outcome, _Waiting):
                yield visit.job.id, visit.outcome.reason

    def over_budget(self) -> bool:
        """Whether, visiting every job, the cycle would have stopped at its placement budget
        with jobs left (then they wait as unconsidered, and these waits say so)."""
        made, stopped = _replay(self._snapshot, self._policy, self._visits, stop=True)
        self._made, self._more = made, stopped
        return stopped

    def _all(self) -> tuple[Wait, ...]:
        if self._made is None:
            self._made, _ = _replay(self._snapshot, self._policy, self._visits, stop=self._more)
        return self._made

    def __len__(self) -> int:
        return len(self._all())

    @overload
    def __getitem__(self, index: int) -> Wait: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Wait]: ...
    def __getitem__(self, index: int | slice) -> Wait | Sequence[Wait]:
        return self._all()[index]

    def __iter__(self) -> Iterator[Wait]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Waits):
            return self._all() == other._all()
        return self._all() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._all())


def judged_reasons(waiting: Sequence[Wait]) -> Iterator[tuple[str, PendingReason]]:
    """(job id, reason) of waiting jobs, without numbering the jobs behind blocked StrictFIFO
    heads when ``schedule`` left them unread: every job that preempted or holds nominated
    nodes is among them (the cycle judges those first)."""
    if isinstance(waiting, _Waits):
        yield from waiting.judged()
    else:
        for wait in waiting:
            yield wait.job_id, wait.reason


def _replay(
    snapshot: Snapshot, policy: Policy, visits: tuple[_Visit, ...], *, stop: bool
) -> tuple[tuple[Wait, ...], bool]:
    """Every waiting job's ``Wait``: the fair order again over all pending jobs, each judged
    job's outcome as the cycle found it, the standings charged as its admissions charged them,
    and the jobs behind a blocked StrictFIFO head waiting for it (``schedule`` step 8). With
    ``stop``, the jobs after the placement budget was spent are unconsidered; the second value
    says whether there were any."""
    queues = {q.name: q for q in snapshot.queues}
    charged: dict[str, float] = {}
    base = snapshot.standings

    def standing(tenant: str) -> float:
        return base.get(tenant, 0.0) + charged.get(tenant, 0.0)

    budget = policy.max_placements_per_cycle
    judged = {visit.job.id: visit for visit in visits}
    blocked: dict[str, PendingReason] = {}
    waits: list[Wait] = []
    in_queue: dict[str, int] = {}
    considered: set[str] = set()
    placed = 0
    stopped = False
    members = FairTree.of(snapshot, policy.admission_charge_s)
    for job in _fair_order(snapshot, queues, policy.order_key, standing, None, members):
        if stop and budget is not None and placed >= budget:
            stopped = True
            break
        considered.add(job.id)
        visit = judged.get(job.id)
        if visit is None:  # behind a blocked head: the cycle never visited it
            reason = blocked.get(job.queue)
            assert reason is not None, f"{job.id} was neither judged nor behind a blocked head"
            _add_wait(waits, in_queue, job, reason)
            continue
        outcome = visit.outcome
        if isinstance(outcome, Admit):
            placed += len(outcome.placements)
            charged[job.tenant] = charged.get(job.tenant, 0.0) + visit.charge
            continue
        _add_wait(waits, in_queue, job, outcome.reason, outcome.reserved_at)
        queue = queues.get(job.queue)
        if (
            queue is not None
            and job.queue not in blocked
            and queue.strategy is QueueStrategy.STRICT_FIFO
            and outcome.reason.code is not ReasonCode.UNSCHEDULABLE
        ):
            blocked[job.queue] = _blocked_by_head(queue, job.id)
    if stopped:  # the rest wait for the next cycle, in the snapshot's order
        assert budget is not None
        reason = _over_budget(budget)
        for job in snapshot.pending:
            if job.id not in considered:
                _add_wait(waits, in_queue, job, reason)
    return tuple(waits), stopped


def _add_wait(
    waits: list[Wait],
    in_queue: dict[str, int],
    job: PendingJob,
    reason: PendingReason,
    reserved_at: float | None = None,
) -> None:
    """The job waits; its positions are the order in which the cycle visited the waiting."""
    position = in_queue[job.queue] = in_queue.get(job.queue, 0) + 1
    waits.append(Wait(job.id, reason, position, len(waits) + 1, reserved_at))


def _fair_order(
    snapshot: Snapshot,
    queues: Mapping[str, QueueView],
    order_key: OrderKey,
    standing: Callable[[str], float],
    dropped: Container[str] | None,
    members: FairTree,
) -> Iterator[PendingJob]:
    """Jobs in order: each queue's own order, queue heads by standing (lowest first).

    A queue's own order is the policy's, with its members' jobs interleaved by the members'
    standing within the tenant (``fair_tree``).

    Jobs for which victims were stopped (they hold nominated nodes) come first: the fair order
    chose them when it preempted for them, and the quota and nodes freed are theirs; were they
    left to the fair order again, a borrower could take that room back and be preempted again,
    round after round. Jobs of unknown queues come last. A heap entry's standing may be stale
    after an admission of the same tenant; such an entry is pushed back with its new standing
    before it is used. A queue named in ``dropped`` (looked at as the order goes) yields no
    more jobs from its heap entry on: the jobs behind a blocked StrictFIFO head.
    """
    ordered, preemptors = _by_queue_in_order(snapshot, queues, order_key)
    ordered, place_keys = _members_ordered(ordered, members, order_key)

    def key_of(name: str, k: int) -> tuple[float | int | str, ...]:
        keys = place_keys.get(name)  # a queue reordered by member: each place keeps its key
        return keys[k] if keys is not None else order_key(ordered[name][k])

    yield from preemptors
    skip = {job.id for job in preemptors}
    unknown: list[PendingJob] = []
    heap: list[tuple[float, tuple[float | int | str, ...], str]] = []
    next_index: dict[str, int] = {}
    for name, jobs in ordered.items():
        if name not in queues:
            unknown.extend(job for job in jobs if job.id not in skip)
            continue
        k = _skip(jobs, 0, skip)
        if k < len(jobs):
            head = jobs[k]
            next_index[name] = k
            heap.append((standing(head.tenant), key_of(name, k), name))
    heapq.heapify(heap)
    while heap:
        was, key, name = heapq.heappop(heap)
        if dropped is not None and name in dropped:
            continue
        jobs = ordered[name]
        job = jobs[next_index[name]]
        now_standing = standing(job.tenant)
        if now_standing > was:
            heapq.heappush(heap, (now_standing, key, name))
            continue
        yield job
        k = next_index[name] = _skip(jobs, next_index[name] + 1, skip)
        if k < len(jobs):
            following = jobs[k]
            heapq.heappush(heap, (standing(following.tenant), key_of(name, k), name))
    unknown.sort(key=order_key)
    yield from unknown


def _members_ordered(
    ordered: Mapping[str, Sequence[PendingJob]], members: FairTree, order_key: OrderKey
) -> tuple[Mapping[str, Sequence[PendingJob]], dict[str, list[tuple[float | int | str, ...]]]]:
    """Each queue's jobs with its tenants' members interleaved by their standing (fair
    share's second level, ``fair_tree``), and for the queues so reordered the key of each
    place. Queues of one member, or of jobs naming none, are left as they are (and unkeyed)."""
    place_keys: dict[str, list[tuple[float | int | str, ...]]] = {}
    reordered: dict[str, Sequence[PendingJob]] | None = None
    for name, jobs in ordered.items():
        if not members.mixes_members(jobs):
            continue
        keyed = [(order_key(job), job) for job in jobs]
        members.order_members(keyed)
        if reordered is None:
            reordered = dict(ordered)  # the snapshot's index is shared: never changed in place
        reordered[name] = [job for _key, job in keyed]
        place_keys[name] = [key for key, _job in keyed]
    return (ordered if reordered is None else reordered), place_keys


def _skip(jobs: Sequence[PendingJob], k: int, skip: Container[str]) -> int:
    """The index of the first job from ``k`` on that is not in ``skip`` (preemptors)."""
    while k < len(jobs) and jobs[k].id in skip:
        k += 1
    return k


def _by_queue_in_order(
    snapshot: Snapshot, queues: Mapping[str, QueueView], order_key: OrderKey
) -> tuple[Mapping[str, Sequence[PendingJob]], list[PendingJob]]:
    """Each queue's jobs in its order, and the jobs holding nominated nodes of known queues in
    order (they are also in their queue's list, where the fair order skips them). Taken from
    the snapshot's ``pending_index`` when it is sorted by the same key, else keyed and sorted
    here: keys are total orders (they end in the job id), so both give the same order."""
    index = snapshot.pending_index
    if index is not None and index.order_key is order_key:
        nominated = [job for job in index.nominated if job.queue in queues]
        return index.by_queue, sorted(nominated, key=order_key)
    keyed: dict[str, list[tuple[tuple[float | int | str, ...], PendingJob]]] = {}
    preemptors: list[PendingJob] = []
    for job in snapshot.pending:
        if job.nominated_nodes and job.queue in queues:
            preemptors.append(job)
            continue
        keyed.setdefault(job.queue, []).append((order_key(job), job))
    ordered: dict[str, Sequence[PendingJob]] = {}
    for name, jobs in keyed.items():
        jobs.sort(key=_KEY)
        ordered[name] = [job for _key, job in jobs]
    return ordered, sorted(preemptors, key=order_key)


def _admit_or_explain(
    cycle: Cycle, job: PendingJob, queue: QueueView, preempted: list[Preempt]
) -> Admit | _Waiting:
    flavors = cycle.flavors_for(queue)
    if not flavors:
        return _Waiting(_no_flavor(cycle, job, queue))
    reasons: list[tuple[str, PendingReason]] = []
    capacity_short: list[str] = []
    for flavor in flavors:
        verdict = cycle.quota.check(queue.name, flavor, job.total_gpus)
        if verdict.fits and queue.extended_nominal:
            verdict = cycle.quota.check_extended(queue.name, flavor, job.total_extended)
        if not verdict.fits:
            assert verdict.reason is not None
            reasons.append((flavor, verdict.reason))
            continue
        attempt, reason = _place(cycle, job, flavor)
        if attempt.fits:
            cycle.admit(job, flavor)
            return Admit(job.id, attempt.placements, flavor=flavor)
        assert reason is not None
        reasons.append((flavor, reason))
        if reason.code in (ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.BLOCKED_BY_RESERVATION):
            capacity_short.append(flavor)

    never = cycle.never_fits(job, queue)
    if never is not None:  # no preemption or reservation could ever help it
        return _Waiting(never)
    stopping = cycle.stopping_for(job.id)
    if stopping:
        held = sorted({f for victim in stopping for f in victim.flavor_gpus if f in flavors})
        if held:
            cycle.hold_quota_for(job, held[0], stopping)
        names = [victim.id for victim in stopping]
        return _Waiting(
            PendingReason(
                ReasonCode.WAITING_FOR_PREEMPTION,
                f"waits for {len(names)} preempted job(s) to stop: {', '.join(names)}",
                {"victims": names},
            ),
        )
    if cycle.may_search_victims():
        for flavor in flavors:
            cycle.note_victim_search()
            choice = find_victims(cycle, job, flavor)
            if choice is None:
                continue
            names = [victim.id for victim, _ in choice.victims]
            # The nodes it will start on (its victims' and the free GPUs it counted on) are
            # kept for it from now on, in this cycle and, nominated, in the next ones.
            nodes = tuple(sorted(choice.nodes))
            cycle.preempt_for(job, flavor, [victim for victim, _ in choice.victims], choice.nodes)
            for victim, ground in choice.victims:
                preempted.append(
                    Preempt(
                        victim.id,
                        job.id,
                        PendingReason(
                            ReasonCode.WAITING_FOR_PREEMPTION,
                            f"preempted ({ground}) to make room for job {job.id}",
                            {"preemptor": job.id, "ground": ground, "flavor": flavor},
                        ),
                        nodes,
                    )
                )
            return _Waiting(
                PendingReason(
                    ReasonCode.WAITING_FOR_PREEMPTION,
                    f"preempting {len(names)} job(s) to make room on {flavor}: {', '.join(names)}",
                    {"victims": names, "flavor": flavor},
                ),
            )
    if cycle.policy.backfill:
        for flavor in capacity_short:
            reservation = reserve(cycle, job, flavor)
            if reservation is not None:
                return _Waiting(
                    PendingReason(
                        ReasonCode.WAITING_FOR_RESERVATION,
                        f"needs {gpus(gang_gpus(job), flavor)} together; reserved on "
                        f"{counted(len(reservation.nodes), 'node')} starting "
                        f"{units.relative(reservation.at, cycle.snapshot.now)}, when "
                        f"running jobs reach their maxRuntime",
                        {
                            "flavor": flavor,
                            "reserved_at": reservation.at,
                            "nodes": sorted(reservation.nodes),
                        },
                    ),
                    reserved_at=reservation.at,
                )
    return _Waiting(_most_telling(reasons))


def _place(cycle: Cycle, job: PendingJob, flavor: str) -> tuple[GangAttempt, PendingReason | None]:
    """Place on the flavor, off other jobs' reservations unless the job ends before them."""
    if cycle.known_not_to_fit(job, flavor):
        return _NO_FIT, _capacity_reason(cycle, job, flavor, None)
    allow = cycle.reservation_filter(job.id)
    attempt = cycle.try_place(job, flavor, allow)
    if attempt.fits:
        return attempt, None
    if allow is not None:
        if may_backfill(cycle, job, flavor):
            attempt = cycle.try_place(job, flavor)
            if attempt.fits:
                return attempt, None
        else:
            with cycle.overlays[flavor].transaction():  # a what-if: undone on exit
                probe = cycle.try_place(job, flavor)
            first = cycle.first_reservation(flavor, job.id)
            if probe.fits and first is not None:
                return _NO_FIT, PendingReason(
                    ReasonCode.BLOCKED_BY_RESERVATION,
                    f"would fit now, but on GPUs reserved for job {first.job_id} starting "
                    f"{units.relative(first.at, cycle.snapshot.now)}, and its maxRuntime does "
                    f"not end before then",
                    {"flavor": flavor, "reservation_job": first.job_id, "reserved_at": first.at},
                )
    cycle.remember_failure(job, flavor)
    return _NO_FIT, _capacity_reason(cycle, job, flavor, attempt.placed)


_NO_FIT = GangAttempt((), 0, False)


def _capacity_reason(
    cycle: Cycle, job: PendingJob, flavor: str, placed: int | None
) -> PendingReason:
    """Why the gang does not fit the flavor's free capacity (``placed``: replicas that did)."""
    overlay = cycle.overlays[flavor]
    for task in job.tasks:
        fits, blocked = task_fits_some_node(task, overlay)
        if not fits:
            extra = f"; {blocked} node(s) that could are cordoned or unhealthy" if blocked else ""
            unfit: dict[str, object] = {
                "flavor": flavor,
                "task": task.name,
                "gpu": task.gpu,
                "unschedulable_nodes_that_fit": blocked,
            }
            matching = ""
            if task.nodes is not None:
                matching = f"matching its {task.nodes} "
                unfit["nodes"] = str(task.nodes)
                if task.nodes.excluded:
                    unfit["excluded_nodes"] = sorted(task.nodes.excluded)
            return PendingReason(
                ReasonCode.NO_NODE_FITS,
                f"no schedulable {_kind(flavor)}node {matching}can hold a replica of task "
                f"{task.name} ({replica_size(task)}){extra}",
                unfit,
            )
    request = job.topology
    levels = cycle.snapshot.topology_levels
    if request is not None and request.required:
        level = levels.index(request.level) if request.level in levels else None
        if level is None or not domain_could_hold(job, overlay, level):
            return PendingReason(
                ReasonCode.TOPOLOGY_UNSATISFIABLE,
                f"needs {gang_gpus(job)} GPUs in one {request.level}; no {_kind(flavor)}"
                f"{request.level} has that many schedulable GPUs",
                {"flavor": flavor, "level": request.level, "needed_gpus": gang_gpus(job)},
            )
    short = _spread_short(job, overlay, flavor)
    if short is not None:
        return short
    free = overlay.total_free_gpus()
    shape = ", ".join(f"{t.replicas}x{t.gpu} GPUs" for t in job.tasks)
    where = f" in one {request.level}" if request is not None and request.required else ""
    fit_now = "" if placed is None else f"only {placed} fit now; "
    details: dict[str, object] = {
        "flavor": flavor,
        "gang_size": job.gang_size,
        "free_gpus": free,
        "needed_gpus": job.total_gpus,
    }
    if placed is not None:
        details["placeable_now"] = placed
    extended = job.total_extended
    short_of = ""
    if extended:  # the numbers of each extended resource: needed together, free now
        free_extended = {n: overlay.total_free_extended(n) for n, _a in extended}
        details["needed_extended"] = dict(extended)
        details["free_extended"] = free_extended
        short_of = "".join(
            f"; {extended_amount(n, free_extended[n])} free of the {extended_amount(n, a)} needed"
            for n, a in extended
            if free_extended[n] < a
        )
    excluded = sorted({n for t in job.tasks if t.nodes is not None for n in t.nodes.excluded})
    if excluded:
        details["excluded_nodes"] = excluded
    constrained = "".join(
        f"; task {t.name} may only use nodes matching its {t.nodes}" for t in job.tasks if t.nodes
    )
    needed = "1 replica" if job.gang_size == 1 else f"{job.gang_size} replicas together"
    return PendingReason(
        ReasonCode.INSUFFICIENT_CAPACITY,
        f"needs {needed} ({shape}){where}; {fit_now}"
        f"{gpus(free, flavor)} free on {counted(overlay.schedulable_count(), 'schedulable node')}"
        f"{short_of}{constrained}",
        details,
    )


def _spread_short(job: PendingJob, overlay: CapacityOverlay, flavor: str) -> PendingReason | None:
    """Why a task that limits its replicas per node does not fit: too few nodes have room for
    one of its replicas now (None: enough do, so something else is short)."""
    left = job.gang_size
    for task in job.tasks:
        take = min(left, task.replicas)
        left -= take
        limit = task.max_per_node
        if limit is None or not take:
            continue
        needed = -(-take // limit)
        allow = task_filter(task, None)
        with_room = overlay.nodes_with_room(
            task.gpu, task.cpu_millis, task.memory, allow, task.extended
        )
        if with_room >= needed:
            continue
        return PendingReason(
            ReasonCode.INSUFFICIENT_CAPACITY,
            f"needs {spread_phrase(needed, task, limit)}; {with_room} such "
            f"{'node' if with_room == 1 else 'nodes'}{_of_flavor(flavor)} now",
            {
                "flavor": flavor,
                "task": task.name,
                "max_replicas_per_node": limit,
                "nodes_needed": needed,
                "nodes_with_room": with_room,
            },
        )
    return None


def _of_flavor(flavor: str) -> str:
    return "" if flavor == "default" else f" of flavor {flavor}"


def _kind(flavor: str) -> str:
    return "" if flavor == "default" else f"{flavor} "


_TELLING = {  # when flavors disagree, the reason that says most about what would help
    ReasonCode.BLOCKED_BY_RESERVATION: 0,
    ReasonCode.INSUFFICIENT_CAPACITY: 1,
    ReasonCode.COHORT_EXHAUSTED: 2,
    ReasonCode.QUEUE_QUOTA_EXHAUSTED: 3,
    ReasonCode.TOPOLOGY_UNSATISFIABLE: 4,
    ReasonCode.NO_NODE_FITS: 5,
    ReasonCode.EXCEEDS_QUEUE_QUOTA: 6,
}


def _most_telling(reasons: list[tuple[str, PendingReason]]) -> PendingReason:
    """The reason of the flavor closest to admitting the job (the first such flavor)."""
    if len(reasons) == 1:
        return reasons[0][1]
    _flavor, best = min(reasons, key=lambda item: _TELLING.get(item[1].code, 9))
    others = {flavor: reason.code.value for flavor, reason in reasons}
    return PendingReason(best.code, best.message, {**best.details, "flavors": others})


def _no_flavor(cycle: Cycle, job: PendingJob, queue: QueueView) -> PendingReason:
    named = list(queue.nominal) if queue.nominal is not None else []
    restricted = [n for n in named if n in cycle.flavors and not cycle.allowed(n, queue.name)]
    return PendingReason(
        ReasonCode.FLAVOR_NOT_ALLOWED,
        f"queue {queue.name} may use no flavor"
        + (f" ({', '.join(restricted)} are restricted to other queues)" if restricted else ""),
        {"queue": queue.name, "restricted": restricted},
    )


def _queue_not_found(job: PendingJob) -> PendingReason:
    return PendingReason(
        ReasonCode.QUEUE_NOT_FOUND, f"queue {job.queue} does not exist", {"queue": job.queue}
    )


def _over_budget(budget: int) -> PendingReason:
    return PendingReason(
        ReasonCode.QUEUE_BACKLOG,
        f"not yet considered: this cycle stopped after placing {budget} replicas; the next "
        f"cycle follows at once",
        {"cycle_budget": budget},
    )


def _blocked_by_head(queue: QueueView, head: str) -> PendingReason:
    return PendingReason(
        ReasonCode.BLOCKED_BY_QUEUE_HEAD,
        f"queue {queue.name} is StrictFIFO and job {head} ahead of it cannot start yet",
        {"queue": queue.name, "head": head},
    )
