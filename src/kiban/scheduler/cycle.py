"""The scratch state of one scheduling cycle: capacity per flavor, quotas, charges, reservations.

Built from the immutable snapshot at the start of a cycle and changed only through its methods;
every "what if" (preemption, reservation) runs inside a capacity transaction that undoes itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import TypeVar, cast

from kiban.scheduler.capacity import CapacityOverlay, NodeFilter
from kiban.scheduler.capacity_index import CapacityCache, CapacityIndex, gang_shape
from kiban.scheduler.feasibility import EmptyCluster, never_fits, usable_flavors
from kiban.scheduler.node_match import NodeConstraint
from kiban.scheduler.placement import GangAttempt, place_gang, place_in_topology
from kiban.scheduler.policy import Policy
from kiban.scheduler.quota import QuotaBook
from kiban.scheduler.reasons import PendingReason
from kiban.scheduler.released import EndGroups, RoomMemo
from kiban.scheduler.snapshot import (
    Extended,
    FlavorView,
    PendingJob,
    QueueView,
    RunningJob,
    Snapshot,
    extended_of,
)


def loss_order(job: RunningJob, now: float) -> tuple[float | int | str, ...]:
    """What preempting the job loses, as a sort key: lower priority, then the least work since
    its last checkpoint (or start), then the most recently started."""
    progress = job.last_progress_at if job.last_progress_at is not None else job.started_at
    return (job.priority, now - progress, -job.started_at, job.id)


@dataclass(frozen=True, slots=True)
class Reservation:
    """GPUs on ``nodes`` kept from ``at`` on for a waiting job (EASY backfill)."""

    job_id: str
    flavor: str
    at: float
    nodes: frozenset[str]


_T = TypeVar("_T")
_Shape = tuple[int, int, int, int, int]
_NO_SPREAD = 2**31  # the max_per_node of a task that does not limit it, for shape comparisons

_priority = attrgetter("priority")


def _at_least(shape: _Shape, other: _Shape) -> bool:
    """Whether a gang of ``shape`` is at least as large as one of ``other`` in every entry (so
    at least as hard to place): written out, as the failed-shape memo asks it per job judged."""
    return (
        shape[0] >= other[0]
        and shape[1] >= other[1]
        and shape[2] >= other[2]
        and shape[3] >= other[3]
        and shape[4] >= other[4]
    )


_preempted_by = attrgetter("preempted_by")


@dataclass(slots=True)
class Cycle:
    """What one cycle has decided so far, on top of the snapshot.

    The decisions made so far (admissions charged to tenants, reservations, victims, searches,
    failed shapes) are private: they change only through ``admit``, ``add_reservation``,
    ``preempt_for``, ``note_victim_search`` and ``remember_failure``, and are read through
    methods and read-only views.
    """

    snapshot: Snapshot
    policy: Policy
    overlays: dict[str, CapacityOverlay]
    quota: QuotaBook
    queues: dict[str, QueueView]
    flavors: dict[str, FlavorView]
    _charged: dict[str, float] = field(default_factory=dict, init=False)
    _reservations: list[Reservation] = field(default_factory=list, init=False)
    # node -> the job it is kept for
    _reserved_by: dict[str, str] = field(default_factory=dict, init=False)
    _reservers: set[str] = field(default_factory=set, init=False)  # the jobs holding some
    _victims: set[str] = field(default_factory=set, init=False)
    _preemption_searches: int = field(default=0, init=False)
    _failed_shapes: dict[tuple[str, NodeConstraint | None, Extended], list[_Shape]] = field(
        default_factory=dict, init=False
    )
    # Placements that failed, by flavor, capacity (the overlay's state), the nodes kept for
    # others, and gang shape: how many replicas fitted; and the capacity reasons written.
    _failed_placements: dict[tuple[object, ...], int] = field(default_factory=dict, init=False)
    _fitting: set[tuple[object, ...]] = field(default_factory=set, init=False)
    _capacity_reasons: dict[tuple[object, ...], PendingReason] = field(
        default_factory=dict, init=False
    )
    _running_by_flavor: dict[str, list[RunningJob]] | None = None
    _ending: dict[str, tuple[int, list[tuple[float, RunningJob]]]] = field(default_factory=dict)
    _running_by_queue: Mapping[str, Sequence[RunningJob]] | None = None
    _stopping_for: dict[str, list[RunningJob]] | None = None
    _running_sorted: dict[tuple[str, str], list[RunningJob]] = field(default_factory=dict)
    _lowest_priority: dict[str, int | None] = field(default_factory=dict)
    # what the modules above keep for one cycle (``once_a_cycle``)
    _memo: dict[Hashable, object] = field(default_factory=dict)
    _queue_flavors: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _cohorts: dict[str, list[QueueView]] | None = None
    _scavengers: list[QueueView] | None = None
    cache: CapacityCache = field(default_factory=CapacityCache)
    _empty: EmptyCluster | None = None
    _queue_terms: dict[str, tuple[str, tuple[str, ...], tuple[object, ...]]] = field(
        default_factory=dict
    )
    _shapes_kept: int = 0  # changes of ``_failed_shapes`` so far (part of ``judging_state``)
    # per flavor, what each task shape holds per node on its capacity (for reservations)
    room_memos: dict[str, RoomMemo] = field(default_factory=dict)
    _end_groups: dict[str, tuple[list[tuple[float, RunningJob]], EndGroups]] = field(
        default_factory=dict
    )
    # the earliest reservation per flavor, with how many reservations there were then
    _firsts: dict[str, tuple[int, Reservation | None]] = field(default_factory=dict)
    # ``apart``'s answer, with how many jobs held reservations then
    _apart: tuple[int, set[str]] | None = None

    @classmethod
    def start(cls, snapshot: Snapshot, policy: Policy, cache: CapacityCache | None = None) -> Cycle:
        cache = cache or CapacityCache()
        indexes = cache.indexes(snapshot.nodes)
        queues = {q.name: q for q in snapshot.queues}
        cycle = cls(
            snapshot=snapshot,
            policy=policy,
            cache=cache,
            overlays={
                f.name: CapacityOverlay(indexes.get(f.name) or CapacityIndex())
                for f in snapshot.flavors
            },
            quota=QuotaBook(queues),
            queues=queues,
            flavors={f.name: f for f in snapshot.flavors},
        )
        # Capacity freed by a preemption is kept for the preemptor, from now on.
        index = snapshot.pending_index
        for waiting in index.nominated if index is not None else snapshot.pending:
            if not waiting.nominated_nodes:
                continue
            nominated: dict[str, set[str]] = {}
            for name in waiting.nominated_nodes:
                flavor = cycle.flavor_of_node(name)
                if flavor is not None:
                    nominated.setdefault(flavor, set()).add(name)
            for flavor in sorted(nominated):
                kept = frozenset(nominated[flavor])
                cycle.add_reservation(Reservation(waiting.id, flavor, snapshot.now, kept))
        return cycle

    def stopping_for(self, job_id: str) -> list[RunningJob]:
        """The running jobs being stopped to make room for ``job_id`` (found on first use)."""
        return self._by_preemptor().get(job_id, [])

    def apart(self) -> set[str]:
        """The jobs whose judging reads the job itself beyond its shape: those holding nodes
        kept for them (nominated, or reserved this cycle) and those victims stop for."""
        known = self._apart
        if known is not None and known[0] == len(self._reservers):  # the reservers only grow
            return known[1]
        apart = self._reservers | self._by_preemptor().keys()
        self._apart = (len(self._reservers), apart)
        return apart

    def _by_preemptor(self) -> dict[str, list[RunningJob]]:
        if self._stopping_for is None:
            given = self.snapshot.running_index
            stopping = (
                given.stopping
                if given is not None
                else filter(_preempted_by, self.snapshot.running)  # a job id, never empty
            )
            by_preemptor: dict[str, list[RunningJob]] = {}
            for job in stopping:
                assert job.preempted_by is not None
                by_preemptor.setdefault(job.preempted_by, []).append(job)
            self._stopping_for = by_preemptor
        return self._stopping_for

    def running_by_queue(self) -> Mapping[str, Sequence[RunningJob]]:
        """The running jobs grouped by queue (the snapshot's, or grouped on first use: only
        victim searches need it)."""
        if self._running_by_queue is None:
            given = self.snapshot.running_index
            if given is not None:
                self._running_by_queue = given.by_queue
            else:
                by_queue: defaultdict[str, list[RunningJob]] = defaultdict(list)
                for job in self.snapshot.running:
                    by_queue[job.queue].append(job)
                self._running_by_queue = dict(by_queue)
        return self._running_by_queue

    def flavor_of_node(self, name: str) -> str | None:
        """The flavor of a node of the cycle's flavors (None: no such node)."""
        for flavor, overlay in self.overlays.items():
            if name in overlay.nodes:
                return flavor
        return None

    def cohort_members(self, cohort: str) -> list[QueueView]:
        """The queues of a cohort, by name."""
        if self._cohorts is None:
            cohorts: dict[str, list[QueueView]] = {}
            for q in sorted(self.queues.values(), key=lambda q: q.name):
                if q.cohort is not None:
                    cohorts.setdefault(q.cohort, []).append(q)
            self._cohorts = cohorts
        return self._cohorts.get(cohort, [])

    def scavenger_queues(self) -> list[QueueView]:
        """The ``scavenger`` queues (their jobs are every waiting job's victims), in the
        snapshot's order; found once a cycle, not at each victim search."""
        if self._scavengers is None:
            self._scavengers = [q for q in self.queues.values() if q.scavenger]
        return self._scavengers

    def running_in(self, queue: str, flavor: str) -> list[RunningJob]:
        """The queue's running jobs holding GPUs of the flavor, least loss first (see
        ``loss_order``); sorted once per cycle, when first asked."""
        key = (queue, flavor)
        jobs = self._running_sorted.get(key)
        if jobs is None:
            now = self.snapshot.now
            jobs = [j for j in self.running_by_queue().get(queue, ()) if flavor in j.flavor_gpus]
            jobs.sort(key=lambda job: loss_order(job, now))
            self._running_sorted[key] = jobs
        return jobs

    def lowest_priority(self, queue: str) -> int | None:
        """The lowest priority among the queue's running jobs, of any flavor (None: it has
        none): no job of a flavor ranks lower, so a preemptor that does not outrank it need not
        sort the queue's jobs to find that none may be its victim."""
        if queue in self._lowest_priority:
            return self._lowest_priority[queue]
        jobs = self.running_by_queue().get(queue, ())
        lowest = min(map(_priority, jobs), default=None)
        self._lowest_priority[queue] = lowest
        return lowest

    def running_on(self, flavor: str) -> list[RunningJob]:
        """The running jobs holding GPUs of the flavor (found on first use: most cycles never
        ask, and a large cluster runs tens of thousands of jobs)."""
        by_flavor = self._running_by_flavor
        if by_flavor is None:
            by_flavor = self._running_by_flavor = {}
        jobs = by_flavor.get(flavor)
        if jobs is None:  # one pass per flavor asked (most clusters: one flavor)
            jobs = by_flavor[flavor] = [j for j in self.snapshot.running if flavor in j.flavor_gpus]
        return jobs

    def ending_on(self, flavor: str) -> list[tuple[float, RunningJob]]:
        """The flavor's running jobs with a known end, by end (then id), with the end: their
        expected end, or now for the victims of this cycle. Kept until the victims change
        (they only grow within a cycle), so a cycle's reservations sort them once."""
        victims = self._victims
        known = self._ending.get(flavor)
        if known is not None and known[0] == len(victims):
            return known[1]
        now = self.snapshot.now
        keyed: list[tuple[float, str, RunningJob]] = []
        for r in self.running_on(flavor):
            end = now if r.id in victims else r.expected_end
            if end is not None:
                keyed.append((end, r.id, r))
        keyed.sort(key=itemgetter(0, 1))
        ending = [(end, r) for end, _id, r in keyed]
        self._ending[flavor] = (len(victims), ending)
        return ending

    def end_groups(self, flavor: str) -> EndGroups:
        """``ending_on`` grouped by end, with what each end frees per node (made once per
        list, as far as asked: a cycle's reservations share it)."""
        ending = self.ending_on(flavor)
        known = self._end_groups.get(flavor)
        if known is None or known[0] is not ending:
            known = self._end_groups[flavor] = (ending, EndGroups(ending, self.overlays[flavor]))
        return known[1]

    def hold_quota_for(self, job: PendingJob, flavor: str, victims: Sequence[RunningJob]) -> None:
        """Count the quota as it will be once the victims stopped for ``job`` have stopped and
        it has started, so that no other job of this cycle borrows what was freed for it."""
        for victim in victims:
            self.quota.give(victim.queue, flavor, victim.flavor_gpus.get(flavor, 0))
            if victim.flavor_extended:
                given = victim.flavor_extended.get(flavor, ())
                self.quota.give_extended(victim.queue, flavor, given)
        self.quota.take(job.queue, flavor, job.total_gpus)
        extended = job.total_extended
        if extended:
            self.quota.take_extended(job.queue, flavor, extended)

    def admit(self, job: PendingJob, flavor: str) -> None:
        """Count an admitted job: its quota on the flavor and its charge to its tenant's
        standing (its placement has already taken the capacity)."""
        self.quota.take(job.queue, flavor, job.total_gpus)
        extended = job.total_extended
        if extended:
            self.quota.take_extended(job.queue, flavor, extended)
        self._charged[job.tenant] = self._charged.get(job.tenant, 0.0) + self.charge(job)

    def add_reservation(self, reservation: Reservation) -> None:
        self._reservations.append(reservation)
        self._reservers.add(reservation.job_id)
        for node in reservation.nodes:
            self._reserved_by.setdefault(node, reservation.job_id)

    @property
    def reservation_count(self) -> int:
        """How many reservations the cycle holds so far (nominated ones included)."""
        return len(self._reservations)

    def first_reservation(self, flavor: str, job_id: str) -> Reservation | None:
        """The earliest reservation of another job on the flavor (None: there is none): the
        one a job must end before to backfill, and the one named when it may not."""
        shared = job_id not in self._reservers  # then the answer is the same for every job
        if shared:
            known = self._firsts.get(flavor)
            if known is not None and known[0] == len(self._reservations):
                return known[1]
        first: Reservation | None = None
        for r in self._reservations:  # few: backfill adds at most the max_reservations
            if r.flavor == flavor and r.job_id != job_id and (first is None or r.at < first.at):
                first = r
        if shared:
            self._firsts[flavor] = (len(self._reservations), first)
        return first

    # -- preemption ------------------------------------------------------------------------------
    @property
    def victims(self) -> AbstractSet[str]:
        """The running jobs this cycle preempts (read-only: see ``preempt_for``)."""
        return self._victims

    def may_search_victims(self) -> bool:
        """Whether the policy allows victim searches and this cycle has searches left."""
        policy = self.policy
        return policy.preemption and self._preemption_searches < policy.max_preemption_searches

    def note_victim_search(self) -> None:
        """Count one victim search against the policy's limit per cycle."""
        self._preemption_searches += 1

    def preempt_for(
        self, job: PendingJob, flavor: str, victims: Sequence[RunningJob], nodes: frozenset[str]
    ) -> None:
        """Record that ``victims`` are stopped for ``job``: the nodes it will start on are kept
        for it from now on, its quota is held as it will be, and the victims are taken."""
        self.add_reservation(Reservation(job.id, flavor, self.snapshot.now, nodes))
        self.hold_quota_for(job, flavor, victims)
        self._victims.update(victim.id for victim in victims)

    # -- fair share ------------------------------------------------------------------------------
    def standing(self, tenant: str) -> float:
        """The tenant's standing: its decayed usage per weight, plus this cycle's admissions."""
        return self.snapshot.standings.get(tenant, 0.0) + self._charged.get(tenant, 0.0)

    def charge(self, job: PendingJob) -> float:
        """What admitting the job adds to its tenant's standing within this cycle."""
        queue = self.queues.get(job.queue)
        weight = queue.weight if queue is not None and queue.weight > 0 else 1.0
        return job.total_gpus * self.policy.admission_charge_s / weight

    # -- flavors ---------------------------------------------------------------------------------
    def flavors_for(self, queue: QueueView) -> tuple[str, ...]:
        """The flavors the queue may use, in the order they are tried (found once a cycle)."""
        flavors = self._queue_flavors.get(queue.name)
        if flavors is None:
            flavors = self._queue_flavors[queue.name] = self._by_quota(
                queue, "flavors", lambda: usable_flavors(queue, self.flavors)
            )
        return flavors

    def once_a_cycle(self, key: Hashable, make: Callable[[], _T]) -> _T:
        """``make()``, made on the first ask of ``key`` in this cycle and kept for the rest of
        it: for what follows from the snapshot alone (the victim search's indexes and sums)."""
        memo = self._memo
        if key in memo:
            return cast(_T, memo[key])
        made = memo[key] = make()
        return made

    def _by_quota(self, queue: QueueView, what: str, make: Callable[[], _T]) -> _T:
        """``make()`` of what follows from the queue's quota and the snapshot's flavors alone,
        kept across cycles by the quota book (made afresh for a queue the book does not hold)."""
        if self.quota.queues.get(queue.name) is not queue:
            return make()
        return self.quota.kept((what, queue.name, self.snapshot.flavors), make)

    def never_fits(self, job: PendingJob, queue: QueueView) -> PendingReason | None:
        """Why the job could never start on its queue's flavors, even on idle nodes (None: it
        could). The nodes as if idle are kept in the capacity cache across cycles, and with
        them the answer for each shape of job, queue, flavors and quota ceilings."""
        empty = self._empty
        if empty is None:
            empty = self._empty = self.cache.empty_cluster(self.snapshot.topology_levels)
        terms = self._queue_terms.get(queue.name)
        if terms is None:
            terms = self._queue_terms[queue.name] = self._by_quota(
                queue, "never_fits", lambda: self._never_fits_terms(queue)
            )
        asked = (terms, job.shape)
        return empty.remembered(
            job.id, asked, lambda: never_fits(job, queue, terms[1], empty, self.quota)
        )

    def _never_fits_terms(
        self, queue: QueueView
    ) -> tuple[str, tuple[str, ...], tuple[object, ...]]:
        """What ``never_fits`` depends on besides the job and the idle nodes: the queue's
        flavors and its quota ceilings on them."""
        flavors = self.flavors_for(queue)
        known = queue.name in self.quota.queues
        ceilings: tuple[object, ...] = tuple(
            self.quota.ceiling(queue.name, f) if known else None for f in flavors
        )
        if queue.extended_nominal:  # its limits of extended resources decide too
            ceilings += tuple(
                extended_of(self.quota.extended_nominal(queue.name, f)) for f in flavors
            )
        return (queue.name, flavors, ceilings)

    def allowed(self, flavor: str, queue: str) -> bool:
        view = self.flavors.get(flavor)
        return view is not None and (view.queues is None or queue in view.queues)

    # -- placement -------------------------------------------------------------------------------
    def try_place(
        self, job: PendingJob, flavor: str, allow: NodeFilter | None = None
    ) -> GangAttempt:
        """Place the gang on the flavor's nodes (in one topology domain when asked)."""
        overlay = self.overlays[flavor]
        if job.topology is not None:
            return place_in_topology(
                job, overlay, job.topology, self.snapshot.topology_levels, allow
            )
        return place_gang(job, overlay, allow)

    def place_or_recall(self, job: PendingJob, flavor: str, off_reserved: bool) -> GangAttempt:
        """``try_place`` off the nodes kept for other jobs (``off_reserved``) or on any, answered
        without placing when a gang of the same shape failed this cycle on the same capacity
        (the overlay's ``state``) and the same kept nodes (the reservations so far, the job
        holding none of them, else the filter depends on the job): a placement's outcome
        depends on nothing else, and a BestEffortFIFO window holds thousands of jobs of a few
        shapes."""
        allow = self.reservation_filter(job.id) if off_reserved else None
        key: tuple[object, ...] | None = None
        if allow is None or job.id not in self._reservers:
            key = self._placement_key(job, flavor, allow is not None)
            placed = self._failed_placements.get(key)
            if placed is not None:
                return GangAttempt((), placed, False)
        attempt = self.try_place(job, flavor, allow)
        if key is not None and not attempt.fits:
            self._failed_placements[key] = attempt.placed
        return attempt

    def would_fit(self, job: PendingJob, flavor: str) -> bool:
        """Whether the gang would fit the flavor's free capacity, reservations ignored (a what-if,
        undone), remembered like ``place_or_recall``'s failures, fits too."""
        key = self._placement_key(job, flavor, False)
        if key in self._fitting:
            return True
        if key in self._failed_placements:
            return False
        with self.overlays[flavor].transaction():  # undone on exit
            attempt = self.try_place(job, flavor)
        if attempt.fits:
            self._fitting.add(key)
        else:
            self._failed_placements[key] = attempt.placed
        return attempt.fits

    def _placement_key(
        self, job: PendingJob, flavor: str, off_reserved: bool
    ) -> tuple[object, ...]:
        """What a placement's outcome depends on: the flavor, its free capacity now, the nodes
        kept for others (by how many reservations were made: only added to; -1 for none kept
        off), and the gang's shape (levels are the cycle's)."""
        kept = len(self._reservations) if off_reserved else -1
        state = self.overlays[flavor].state
        return (flavor, state, kept, job.shape)

    def capacity_reason(
        self,
        job: PendingJob,
        flavor: str,
        placed: int | None,
        write: Callable[[], PendingReason],
    ) -> PendingReason:
        """Why the gang does not fit the flavor's free capacity (``write``), kept for the jobs of
        the same shape while the capacity stays (its sentence and numbers depend on nothing
        else: the gang's sizes and task names, the free capacity, ``placed``)."""
        key = (flavor, self.overlays[flavor].state, placed, job.shape)
        reason = self._capacity_reasons.get(key)
        if reason is None:
            reason = self._capacity_reasons[key] = write()
        return reason

    def reserved_for_others(self, job_id: str) -> list[str]:
        """The nodes kept for other jobs' reservations: what ``reservation_filter`` keeps the
        job off (sorted, so what is computed from them does not depend on the order kept). For a
        job holding none, the same list for every job, until a reservation is added."""
        reserved = self._reserved_by
        if job_id in self._reservers:
            return sorted(node for node, owner in reserved.items() if owner != job_id)
        return self.once_a_cycle(("kept", len(self._reservations)), lambda: sorted(reserved))

    def reservation_filter(self, job_id: str) -> NodeFilter | None:
        """Keeps a job off nodes reserved for other jobs (None: nothing is reserved)."""
        reserved = self._reserved_by
        if not reserved:
            return None
        return lambda node: reserved.get(node.name, job_id) == job_id

    def shape(self, job: PendingJob) -> tuple[int, int, int, int, int] | None:
        """The gang's shape when it has one task and no topology (for the failed-shape memo):
        its size per replica, its gang, and how tightly it spreads (a lower ``max_per_node`` is
        a larger last entry), so that a shape at least as large in every entry is as hard to
        place."""
        if len(job.tasks) != 1 or job.topology is not None:
            return None
        task = job.tasks[0]
        spread = -(task.max_per_node if task.max_per_node is not None else _NO_SPREAD)
        return (task.gpu, task.cpu_millis, task.memory, job.gang_size, spread)

    def _failed(self, job: PendingJob, flavor: str) -> list[_Shape]:
        """The shapes that failed on the flavor among jobs limited to the same nodes and asking
        for the same extended resources (the same GPUs without them may fit)."""
        task = job.tasks[0]
        return self._failed_shapes.setdefault((flavor, task.nodes, task.extended), [])

    def known_not_to_fit(self, job: PendingJob, flavor: str) -> bool:
        """A gang at least as large as one that already failed this cycle cannot fit either.

        Within a cycle capacity only shrinks and reservations only grow, so a failure stays a
        failure; the memo spares the placement search for most of a long queue. Failures are
        kept apart by the nodes the task may use: one limited to some nodes says nothing of a
        job that may use others.
        """
        shape = self.shape(job)
        if shape is None:
            return False
        return any(_at_least(shape, failed) for failed in self._failed(job, flavor))

    def known_failure(self, job: PendingJob, flavor: str) -> PendingReason | None:
        """Why the job, or one of the same gang shape, did not fit the flavor's free capacity when
        last tried on the very same capacity (None: not known). A blocked head is tried again in
        every cycle; while no node of the flavor changed (the index empties its memo at any
        change) and this cycle has taken nothing on it yet, the placement would fail again, for
        the same reason (which names no job)."""
        overlay = self.overlays[flavor]
        if not overlay.pristine:
            return None
        return overlay.index.failures.get(gang_shape(job, self.snapshot.topology_levels))

    def note_failure(self, job: PendingJob, flavor: str, reason: PendingReason) -> None:
        """Keep a placement's failure on the flavor's untouched capacity for the next cycles
        (``known_failure``); nothing is kept once this cycle changed the capacity."""
        overlay = self.overlays[flavor]
        if overlay.pristine:
            overlay.index.failures[gang_shape(job, self.snapshot.topology_levels)] = reason

    def remember_failure(self, job: PendingJob, flavor: str) -> None:
        shape = self.shape(job)
        if shape is None:
            return
        shapes = self._failed(job, flavor)
        if any(_at_least(shape, s) for s in shapes):
            return
        shapes[:] = [s for s in shapes if not _at_least(s, shape)]
        shapes.append(shape)
        self._shapes_kept += 1

    # -- verdicts shared by jobs of one shape ----------------------------------------------------
    def judging_state(self) -> tuple[object, ...]:
        """What judging a waiting job (with no victim search) reads of the cycle that changes
        within it: quota use (``QuotaBook.version``), the reservations and
        victims so far (only added to: their counts name them), the failed-shape memo (whose
        answer leaves "placeable now" out of a reason), and per flavor the free capacity
        (``state``), whether it is the index's, and the failures kept across cycles. The other
        memos answer as a fresh placement would, whatever they hold."""
        counts = (
            self.quota.version,
            len(self._reservations),
            len(self._victims),
            self._shapes_kept,
        )
        overlays = self.overlays
        if len(overlays) == 1:  # most clusters: one flavor, no generator
            for overlay in overlays.values():
                return (*counts, overlay.judging_mark())
        return counts + tuple(overlay.judging_mark() for overlay in overlays.values())
