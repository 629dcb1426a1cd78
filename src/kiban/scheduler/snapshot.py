"""The immutable picture of the cluster that the core decides on."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from kiban.scheduler.node_match import NodeConstraint, NodePreference

DEFAULT_FLAVOR = "default"
"""The flavor of every node when the policy declares none."""

Extended = tuple[tuple[str, int], ...]
"""Amounts of extended resources (``nvidia.com/hostdev``, ``hugepages-2Mi``, ...), sorted by
name, none of them zero: hashable, and empty (falsy) for the common job that asks for none."""

NO_EXTENDED: Extended = ()
NO_AMOUNTS: Mapping[str, int] = MappingProxyType({})
"""The extended resources of a node that advertises none (shared: most nodes)."""


NO_HOLDINGS: Mapping[str, Extended] = MappingProxyType({})
NO_LIMITS: Mapping[str, Mapping[str, int]] = MappingProxyType({})


def _no_amounts() -> Mapping[str, int]:
    return NO_AMOUNTS


def _no_holdings() -> Mapping[str, Extended]:
    return NO_HOLDINGS


def _no_limits() -> Mapping[str, Mapping[str, int]]:
    return NO_LIMITS


def extended_of(amounts: Mapping[str, int]) -> Extended:
    """The sorted, hashable form of ``{name: amount}`` (zero amounts left out)."""
    return tuple(sorted((name, amount) for name, amount in amounts.items() if amount))


class QueueStrategy(StrEnum):
    """StrictFIFO: the head blocks its queue. BestEffortFIFO: others may pass a stuck head.
    LeastAttainedService: best effort, in order of the GPU-seconds each job has run so far,
    with bounded preemption (``kiban.scheduler.attained_service``). ShortestExpectedService:
    best effort, smallest expected GPU-seconds first (``kiban.scheduler.expected_service``)."""

    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    LEAST_ATTAINED_SERVICE = "LeastAttainedService"
    SHORTEST_EXPECTED_SERVICE = "ShortestExpectedService"


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the core sees it: capacity, what is free now, and whether it takes new work."""

    name: str
    gpus: int
    cpu_millis: int
    memory: int
    free_gpu_ids: tuple[int, ...]
    free_cpu_millis: int
    free_memory: int
    labels: Mapping[str, str] = field(default_factory=dict)
    schedulable: bool = True
    unschedulable_reason: str = ""
    flavor: str | None = DEFAULT_FLAVOR  # None: matches no declared flavor
    topology: tuple[str, ...] = ()  # its domain at each topology level, outermost first
    extended: Mapping[str, int] = field(default_factory=_no_amounts)  # what it advertises
    free_extended: Mapping[str, int] = field(default_factory=_no_amounts)  # of it, what is free


def node_view(
    *,
    name: str,
    gpus: int,
    cpu_millis: int,
    memory: int,
    used_gpu_ids: set[int] | frozenset[int],
    used_cpu_millis: int,
    used_memory: int,
    labels: Mapping[str, str],
    schedulable: bool = True,
    unschedulable_reason: str = "",
    flavor: str | None = DEFAULT_FLAVOR,
    topology: tuple[str, ...] = (),
    extended: Mapping[str, int] | None = None,
    used_extended: Mapping[str, int] | None = None,
) -> NodeView:
    """A node's view from its capacity and what running replicas use of it."""
    advertised = dict(extended) if extended else NO_AMOUNTS
    used = used_extended or NO_AMOUNTS
    return NodeView(
        name=name,
        gpus=gpus,
        cpu_millis=cpu_millis,
        memory=memory,
        free_gpu_ids=tuple(i for i in range(gpus) if i not in used_gpu_ids),
        free_cpu_millis=cpu_millis - used_cpu_millis,
        free_memory=memory - used_memory,
        labels=dict(labels),
        schedulable=schedulable,
        unschedulable_reason=unschedulable_reason,
        flavor=flavor,
        topology=topology,
        extended=advertised,
        free_extended=(
            {name: amount - used.get(name, 0) for name, amount in advertised.items()}
            if advertised
            else NO_AMOUNTS
        ),
    )


@dataclass(frozen=True, slots=True)
class FlavorView:
    """A kind of GPU node; ``queues`` restricts who may use it (None: every queue)."""

    name: str
    queues: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class QueueView:
    """A queue: nominal GPUs per flavor, cohort limits, GPUs its admitted jobs use, its ordering.

    ``nominal`` lists the flavors the queue may use, in the order they are tried; None means no
    quota at all (every flavor, no limit). Borrowing happens only within a cohort; an absent
    ``borrowing_limit`` entry means no limit beyond what the cohort can lend, an absent
    ``lending_limit`` entry means all of the queue's unused nominal quota may be lent.
    A ``scavenger`` queue's jobs use idle capacity only: any job needing their nodes preempts
    them (``preemption``), and they preempt nothing.
    """

    name: str
    tenant: str
    nominal: Mapping[str, int] | None = None
    used: Mapping[str, int] = field(default_factory=dict)
    strategy: QueueStrategy = QueueStrategy.STRICT_FIFO
    cohort: str | None = None
    borrowing_limit: Mapping[str, int] = field(default_factory=dict)
    lending_limit: Mapping[str, int] = field(default_factory=dict)
    weight: float = 1.0
    extended_nominal: Mapping[str, Mapping[str, int]] = field(default_factory=_no_limits)
    extended_used: Mapping[str, Mapping[str, int]] = field(default_factory=_no_limits)
    scavenger: bool = False
    # What its quota fixes (name, cohort, nominal and limits), found once when made (``replace``
    # makes anew): the quota book keeps what follows from the queues' quotas across cycles.
    _quota_terms: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        nominal = None if self.nominal is None else tuple(self.nominal.items())
        terms = (
            self.name,
            self.cohort,
            nominal,
            tuple(self.lending_limit.items()),
            tuple(self.borrowing_limit.items()),
            tuple((f, tuple(amounts.items())) for f, amounts in self.extended_nominal.items()),
        )
        object.__setattr__(self, "_quota_terms", terms)

    @property
    def quota_terms(self) -> tuple[object, ...]:
        """Its quota's terms (extended resources' included), by value: equal for queues whose
        quotas are equal."""
        return self._quota_terms


@dataclass(frozen=True, slots=True)
class TaskDemand:
    """What each replica of one task needs, on which nodes it may run (None: any), which of
    those it would rather have (None: best fit alone), and how many of its replicas one node
    may hold (``max_per_node``, the manifest's ``maxReplicasPerNode``; None: no limit).

    ``max_per_node`` holds within the task: replicas of the job's other tasks do not count.
    ``extended`` is what each replica needs of extended resources (empty for most jobs)."""

    name: str
    replicas: int
    gpu: int
    cpu_millis: int
    memory: int
    nodes: NodeConstraint | None = None
    prefers: NodePreference | None = None
    max_per_node: int | None = None
    extended: Extended = NO_EXTENDED


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """Place the gang inside one domain of ``level`` (required), or try to (preferred)."""

    level: str
    required: bool = True


class GangShape:
    """A gang's shape (its tasks, gang size and topology request), one object per distinct
    shape while some job holds it: the core's per-cycle memos key on it by identity, so a
    look-up per waiting job hashes no task (``PendingJob.shape``)."""

    __slots__ = ("__weakref__", "gang_size", "tasks", "topology")

    def __init__(
        self, tasks: tuple[TaskDemand, ...], gang_size: int, topology: TopologyRequest | None
    ) -> None:
        self.tasks = tasks
        self.gang_size = gang_size
        self.topology = topology

    def __repr__(self) -> str:
        return f"GangShape({self.tasks!r}, {self.gang_size}, {self.topology!r})"


_SHAPES: weakref.WeakValueDictionary[
    tuple[tuple[TaskDemand, ...], int, TopologyRequest | None], GangShape
] = weakref.WeakValueDictionary()


def gang_shape_of(
    tasks: tuple[TaskDemand, ...], gang_size: int, topology: TopologyRequest | None
) -> GangShape:
    """The one ``GangShape`` of these tasks, gang size and topology (made on first use; it
    goes when no job holds it). Two racing threads may make two of one shape: a memo keyed
    on one misses the other's entries, and judges afresh, alike."""
    key = (tasks, gang_size, topology)
    shape = _SHAPES.get(key)
    if shape is None:
        shape = GangShape(tasks, gang_size, topology)
        _SHAPES[key] = shape
    return shape


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting for admission; ``gang_size`` replicas must start together.

    ``sequence`` orders jobs submitted at the same instant; ``preempts`` is its priority class's
    PreemptLowerPriority; ``max_runtime`` (seconds) lets backfill and forecasts know its end.
    """

    id: str
    queue: str
    priority: int
    submitted_at: float
    tasks: tuple[TaskDemand, ...]
    gang_size: int
    tenant: str = "default"
    sequence: int = 0
    max_runtime: float | None = None
    topology: TopologyRequest | None = None
    preempts: bool = False
    preempted_by: str | None = None  # the job that preempted it last, which it may not preempt
    nominated_nodes: tuple[str, ...] = ()  # freed for it by its preemptions: others keep off
    attained_service: float = 0.0  # GPU-seconds it ran before (least-attained-service orders)
    member: str | None = None  # who in its tenant submitted it (fair share's second level)
    estimated_runtime: float | None = None  # from history when it has no maxRuntime: plans only
    # Its gang shape, found once when made (``replace`` makes anew): the core looks its
    # memos up by it for every waiting job, cycle after cycle.
    _shape: GangShape = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_shape", gang_shape_of(self.tasks, self.gang_size, self.topology))

    @property
    def shape(self) -> GangShape:
        """Its gang shape: the same object for every job of equal tasks, gang and topology."""
        return self._shape

    @property
    def total_replicas(self) -> int:
        return sum(t.replicas for t in self.tasks)

    @property
    def total_gpus(self) -> int:
        tasks = self.tasks
        if len(tasks) == 1:  # most jobs: spares a generator on the core's hottest path
            return tasks[0].replicas * tasks[0].gpu
        return sum(t.replicas * t.gpu for t in tasks)

    @property
    def total_extended(self) -> Extended:
        """The extended resources of all its replicas together (empty for most jobs)."""
        tasks = self.tasks
        if len(tasks) == 1 and not tasks[0].extended:
            return NO_EXTENDED
        totals: dict[str, int] = {}
        for task in tasks:
            for name, amount in task.extended:
                totals[name] = totals.get(name, 0) + amount * task.replicas
        return extended_of(totals)


@dataclass(frozen=True, slots=True)
class RunningReplica:
    """What one replica of a running job holds on its node."""

    node: str
    gpu_ids: tuple[int, ...]
    cpu_millis: int
    memory: int
    extended: Extended = NO_EXTENDED


@dataclass(frozen=True, slots=True)
class RunningJob:
    """An admitted job: what it holds, and what preemption and forecasts need to know of it.

    ``flavor_gpus`` is what it counts against its queue's quota, per flavor. ``last_progress_at``
    is its last checkpoint (or its start when it has reported none): the work a preemption
    loses is ``now - last_progress_at``. It may not be preempted before ``protected_until``
    (its priority class's minRuntime after its start).
    """

    id: str
    queue: str
    tenant: str
    priority: int
    submitted_at: float
    started_at: float
    replicas: tuple[RunningReplica, ...]
    flavor_gpus: Mapping[str, int]
    max_runtime: float | None = None
    last_progress_at: float | None = None
    protected_until: float = 0.0
    preempted_by: str | None = None  # being stopped to make room for this pending job
    stopping: bool = False  # being stopped (cancel, failure, preemption): never a victim
    attained_service: float = 0.0  # GPU-seconds it ran before this attempt
    tasks: tuple[TaskDemand, ...] = ()  # as it asked when admitted (empty: not known)
    flavor_extended: Mapping[str, Extended] = field(default_factory=_no_holdings)  # per flavor
    member: str | None = None  # who in its tenant submitted it (fair share's second level)
    estimated_runtime: float | None = None  # from history when it has no maxRuntime: plans only
    # GPUs held, summed once when made (``replace`` makes anew): victim searches under an order
    # ground (LAS's attained service) ask it of every running job, search after search.
    _gpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_gpus", sum(len(r.gpu_ids) for r in self.replicas))

    @property
    def gpus(self) -> int:
        return self._gpus

    def stoppable_at(self, now: float) -> bool:
        """Whether any preemption ground may stop it at ``now``: not stopping already, not back
        from a preemption's stop not yet seen, past its minRuntime."""
        return not self.stopping and self.preempted_by is None and not now < self.protected_until

    @property
    def expected_end(self) -> float | None:
        """When ``maxRuntime`` ends it at the latest, else when its estimated run time ends it
        (None: neither known). Only plans (backfill, forecasts) read it; nothing stops a job
        at an estimated end."""
        runtime = self.max_runtime if self.max_runtime is not None else self.estimated_runtime
        return None if runtime is None else self.started_at + runtime

    @property
    def end_estimated(self) -> bool:
        """Whether ``expected_end`` comes from an estimate, not a maxRuntime."""
        return self.max_runtime is None and self.estimated_runtime is not None


@dataclass(frozen=True, slots=True)
class RunningIndex:
    """The running jobs grouped as the core looks them up: by queue (for victim searches) and
    those being stopped (``preempted_by`` set). Optional in a snapshot: a producer that keeps
    its running jobs so (the simulator's cluster state) spares the core regrouping tens of
    thousands of them every cycle. It must hold exactly the jobs of ``Snapshot.running``."""

    by_queue: Mapping[str, Sequence[RunningJob]]
    stopping: Sequence[RunningJob]


@dataclass(frozen=True, slots=True)
class PendingIndex:
    """The pending jobs as the fair order takes them: each queue's jobs already sorted by
    ``order_key``, and those holding nominated nodes (they go first). Optional in a snapshot:
    a producer that keeps its waiting jobs so (the simulator's cluster state) spares the core
    keying and sorting the whole backlog every cycle; the core uses it only when ``order_key``
    is its policy's own. It must hold exactly the jobs of ``Snapshot.pending``.

    ``one_member``: queues whose jobs are all of one (tenant, member), or name no member; the
    fair order leaves them in the policy's order without looking at every job (``fair_tree``).
    A queue left out is looked at."""

    by_queue: Mapping[str, Sequence[PendingJob]]
    nominated: Sequence[PendingJob]
    order_key: Callable[[PendingJob], tuple[float | int | str, ...]]
    one_member: AbstractSet[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one scheduling cycle needs, taken at ``now``.

    ``standings`` is each tenant's fair-share standing (decayed usage / weight; lower goes
    first). ``topology_levels`` names the levels of every node's ``topology`` path.
    ``member_standings`` and ``member_weights`` are fair share's second level, per (tenant,
    member): a member's decayed usage per its weight, and that weight (see ``fair_tree``).
    """

    now: float
    nodes: tuple[NodeView, ...]
    queues: tuple[QueueView, ...]
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...] = ()
    flavors: tuple[FlavorView, ...] = (FlavorView(DEFAULT_FLAVOR),)
    standings: Mapping[str, float] = field(default_factory=dict)
    topology_levels: tuple[str, ...] = ()
    running_index: RunningIndex | None = None  # None: the core groups ``running`` itself
    member_standings: Mapping[tuple[str, str], float] = field(default_factory=dict)
    member_weights: Mapping[tuple[str, str], float] = field(default_factory=dict)
    pending_index: PendingIndex | None = None  # None: the core sorts ``pending`` itself
