"""One scheduling cycle over an immutable snapshot. Pure: same snapshot, same decisions."""

from __future__ import annotations

from kiban.scheduler import units
from kiban.scheduler.attained_service import with_queue_strategies
from kiban.scheduler.backfill import may_backfill, reserve
from kiban.scheduler.capacity import CapacityOverlay
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.cycle import Cycle
from kiban.scheduler.decisions import Admit, Decisions, Preempt
from kiban.scheduler.fair_order import fair_order
from kiban.scheduler.fair_tree import FairTree
from kiban.scheduler.placement import (
    GangAttempt,
    domain_could_hold,
    gang_gpus,
    task_filter,
    task_fits_some_node,
)
from kiban.scheduler.policy import DEFAULT_POLICY, Policy
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
from kiban.scheduler.verdicts import Verdicts
from kiban.scheduler.wait_replay import Visit, Waiting, Waits, blocked_by_head


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
       it waits for them; else look for victims (scavenger, priority, reclaim, fair share)
       after whose stop it would fit, and preempt them (a scavenger queue's job preempts
       nobody, reserves nothing, and comes after the other queues' jobs in the order).
    6. Otherwise, if free capacity (not quota) is what it lacks, reserve GPUs for it at the
       earliest time the running jobs' maxRuntime frees enough.
    7. Once the cycle has placed ``max_placements_per_cycle`` replicas, the jobs after wait
       unconsidered for the next cycle, which the caller runs at once (``Decisions.more``).
    8. Number the waiting jobs within their queues and within the cluster, in the order visited
       (the jobs behind a blocked StrictFIFO head are numbered too, though the cycle does not
       visit them: see ``wait_replay``; the numbers are made when ``Decisions.waiting`` is read).
    """
    policy = with_queue_strategies(policy, snapshot.queues)  # LeastAttainedService queues
    cycle = Cycle.start(snapshot, policy, cache)
    blocked: dict[str, PendingReason] = {}  # per StrictFIFO queue whose head waits: why the rest do
    admitted: list[Admit] = []
    preempted: list[Preempt] = []
    visits: list[Visit] = []  # the jobs judged, in order; the jobs behind blocked heads are not
    budget = policy.max_placements_per_cycle
    placed = 0
    more = False

    members = FairTree.of(snapshot, policy.admission_charge_s)
    verdicts = Verdicts(cycle)
    for job in fair_order(
        snapshot, cycle.queues, policy.order_key, cycle.standing, blocked, members
    ):
        if budget is not None and placed >= budget:
            more = True
            break
        queue = cycle.queues.get(job.queue)
        if queue is None:
            visits.append((job, Waiting(_queue_not_found(job)), 0.0))
            continue
        behind = blocked.get(queue.name)
        if behind is not None:  # a job that preempted, behind its queue's blocked head
            visits.append((job, Waiting(behind), 0.0))
            continue
        outcome = _admit_or_explain(cycle, job, queue, preempted, verdicts)
        if isinstance(outcome, Admit):
            admitted.append(outcome)
            placed += len(outcome.placements)
            visits.append((job, outcome, cycle.charge(job)))
            continue
        visits.append((job, outcome, 0.0))
        if queue.strategy is not _STRICT_FIFO:
            continue
        if outcome.reason.code is not _UNSCHEDULABLE:
            # The rest of the queue waits behind it: the fair order drops the queue, and their
            # waits are written only when read (``Waits``), for one shared reason.
            blocked[queue.name] = blocked_by_head(queue, job.id)
        else:  # it holds up nobody
            verdicts.passed(queue.name)
    waits = Waits(snapshot, policy, tuple(visits), more)
    if not more and blocked and budget is not None and placed >= budget:
        # Visiting each job behind a blocked head, the cycle would have stopped at the first
        # one after the budget was spent, if any came after it: the replay says.
        more = waits.over_budget()
    return Decisions(tuple(admitted), waits, tuple(preempted), more=more)


def _admit_or_explain(
    cycle: Cycle, job: PendingJob, queue: QueueView, preempted: list[Preempt], verdicts: Verdicts
) -> Admit | Waiting:
    """Admit the job, or say why it waits: the reason of an earlier job of the same queue and
    gang shape judged at the same state when there is one (``verdicts``), else ``_judge``'s."""
    key = verdicts.key(job, queue)
    if key is not None:
        known = verdicts.known(key)
        if known is not None:
            return known
    verdicts.judging()
    outcome = _judge(cycle, job, queue, preempted)
    if key is not None and isinstance(outcome, Waiting) and outcome.reserved_at is None:
        verdicts.keep(key, outcome)
    return outcome


def _judge(
    cycle: Cycle, job: PendingJob, queue: QueueView, preempted: list[Preempt]
) -> Admit | Waiting:
    """Judge the job afresh: quota and placement on each flavor, then why it could never
    start, the victims stopping or to stop for it, a reservation (``schedule`` steps 4-6)."""
    flavors = cycle.flavors_for(queue)
    if not flavors:
        return Waiting(_no_flavor(cycle, job, queue))
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
        if reason.code in _CAPACITY_SHORT:
            capacity_short.append(flavor)

    never = cycle.never_fits(job, queue)
    if never is not None:  # no preemption or reservation could ever help it
        return Waiting(never)
    stopping = cycle.stopping_for(job.id)
    if stopping:
        held = sorted({f for victim in stopping for f in victim.flavor_gpus if f in flavors})
        if held:
            cycle.hold_quota_for(job, held[0], stopping)
        names = [victim.id for victim in stopping]
        return Waiting(
            PendingReason(
                ReasonCode.WAITING_FOR_PREEMPTION,
                f"waits for {len(names)} preempted job(s) to stop: {', '.join(names)}",
                {"victims": names},
            ),
        )
    if not queue.scavenger and cycle.may_search_victims():  # a scavenger preempts nobody
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
                            {"preemptor": job.id, "ground": ground.value, "flavor": flavor},
                        ),
                        nodes,
                    )
                )
            return Waiting(
                PendingReason(
                    ReasonCode.WAITING_FOR_PREEMPTION,
                    f"preempting {len(names)} job(s) to make room on {flavor}: {', '.join(names)}",
                    {"victims": names, "flavor": flavor},
                ),
            )
    if cycle.policy.backfill and not queue.scavenger:  # idle capacity only: it reserves none
        for flavor in capacity_short:
            reservation = reserve(cycle, job, flavor)
            if reservation is not None:
                return Waiting(
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
    return Waiting(_most_telling(reasons))


def _place(cycle: Cycle, job: PendingJob, flavor: str) -> tuple[GangAttempt, PendingReason | None]:
    """Place on the flavor, off other jobs' reservations unless the job ends before them."""
    if cycle.known_not_to_fit(job, flavor):
        return _NO_FIT, _capacity_reason(cycle, job, flavor, None)
    allow = cycle.reservation_filter(job.id)
    if allow is None:  # the answer depends on the free capacity alone: it may be known
        known = cycle.known_failure(job, flavor)
        if known is not None:
            cycle.remember_failure(job, flavor)
            return _NO_FIT, known
    attempt = cycle.place_or_recall(job, flavor, off_reserved=True)
    if attempt.fits:
        return attempt, None
    if allow is not None:
        if may_backfill(cycle, job, flavor):
            attempt = cycle.place_or_recall(job, flavor, off_reserved=False)
            if attempt.fits:
                return attempt, None
        else:
            first = cycle.first_reservation(flavor, job.id)
            if first is not None and cycle.would_fit(job, flavor):
                return _NO_FIT, PendingReason(
                    ReasonCode.BLOCKED_BY_RESERVATION,
                    f"would fit now, but on GPUs reserved for job {first.job_id} starting "
                    f"{units.relative(first.at, cycle.snapshot.now)}, and its maxRuntime does "
                    f"not end before then",
                    {"flavor": flavor, "reservation_job": first.job_id, "reserved_at": first.at},
                )
    cycle.remember_failure(job, flavor)
    reason = _capacity_reason(cycle, job, flavor, attempt.placed)
    if allow is None:
        cycle.note_failure(job, flavor, reason)
    return _NO_FIT, reason


_NO_FIT = GangAttempt((), 0, False)
_CAPACITY_SHORT = frozenset((ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.BLOCKED_BY_RESERVATION))
_STRICT_FIFO = QueueStrategy.STRICT_FIFO  # read per job visited: a module name is read faster
_UNSCHEDULABLE = ReasonCode.UNSCHEDULABLE


def _capacity_reason(
    cycle: Cycle, job: PendingJob, flavor: str, placed: int | None
) -> PendingReason:
    """Why the gang does not fit the flavor's free capacity (``placed``: replicas that did),
    written once per gang shape and capacity (``Cycle.capacity_reason``)."""
    return cycle.capacity_reason(
        job, flavor, placed, lambda: _write_reason(cycle, job, flavor, placed)
    )


def _write_reason(cycle: Cycle, job: PendingJob, flavor: str, placed: int | None) -> PendingReason:
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
