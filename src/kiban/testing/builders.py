"""Small fluent builders of scheduler snapshots, for tables of test cases.

    nodes = cluster().nodes(3, gpus=2).node("big", gpus=8).cordoned("node-1")
    jobs = [job("a").queue("q").replicas(3, gpu=2).gang(2).priority(10).submitted(5.0),
            job("b").replicas(3, gpu=1, max_per_node=1)]  # one replica per node
    snap = snapshot(nodes=nodes, queues=[queue("q").quota(4).strict()], pending=jobs,
                    running_gpus={"node-0": 1})

Defaults make GPUs the binding resource: nodes have plenty of CPU and memory, and a job is one
replica of one task ``worker`` needing 1 GPU, 1 CPU and 1 GiB. Nodes, queues and the snapshot are
built here; pending and running jobs in ``job_builders`` (their names are importable from here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Self

from kiban.scheduler.snapshot import (
    DEFAULT_FLAVOR,
    FlavorView,
    NodeView,
    PendingJob,
    QueueStrategy,
    QueueView,
    RunningJob,
    Snapshot,
    node_view,
)
from kiban.testing.job_builders import GIB, JobBuilder, RunningBuilder, job, running

__all__ = [
    "DEFAULT_NODE_CPU_MILLIS",
    "DEFAULT_NODE_MEMORY",
    "GIB",
    "ClusterBuilder",
    "JobBuilder",
    "QueueBuilder",
    "RunningBuilder",
    "cluster",
    "job",
    "queue",
    "running",
    "snapshot",
]
DEFAULT_NODE_CPU_MILLIS = 64_000
DEFAULT_NODE_MEMORY = 512 * GIB


@dataclass
class _NodeSpec:
    name: str
    gpus: int
    cpu_millis: int
    memory: int
    labels: dict[str, str]
    schedulable: bool = True
    unschedulable_reason: str = ""
    flavor: str | None = DEFAULT_FLAVOR
    topology: tuple[str, ...] = ()
    extended: dict[str, int] = field(default_factory=dict)


@dataclass
class ClusterBuilder:
    """Nodes in the order they were added; ``build`` gives idle ``NodeView``s."""

    _nodes: dict[str, _NodeSpec] = field(default_factory=dict)

    def nodes(
        self,
        count: int,
        *,
        gpus: int = 0,
        cpu_millis: int = DEFAULT_NODE_CPU_MILLIS,
        memory: int = DEFAULT_NODE_MEMORY,
        labels: Mapping[str, str] | None = None,
        prefix: str = "node",
        flavor: str | None = DEFAULT_FLAVOR,
        topology: tuple[str, ...] = (),
        extended: Mapping[str, int] | None = None,
    ) -> Self:
        """Add ``count`` alike nodes named ``{prefix}-{i}`` with the lowest unused numbers.

        With ``topology``, each node's path is that domain plus its own name as the last level.
        """
        i = 0
        for _ in range(count):
            while f"{prefix}-{i}" in self._nodes:
                i += 1
            name = f"{prefix}-{i}"
            self.node(
                name,
                gpus=gpus,
                cpu_millis=cpu_millis,
                memory=memory,
                labels=labels,
                flavor=flavor,
                topology=(*topology, name) if topology else (),
                extended=extended,
            )
        return self

    def node(
        self,
        name: str,
        *,
        gpus: int = 0,
        cpu_millis: int = DEFAULT_NODE_CPU_MILLIS,
        memory: int = DEFAULT_NODE_MEMORY,
        labels: Mapping[str, str] | None = None,
        flavor: str | None = DEFAULT_FLAVOR,
        topology: tuple[str, ...] = (),
        extended: Mapping[str, int] | None = None,
    ) -> Self:
        """Add one node (or replace the one of that name); ``extended``: the extended
        resources it advertises (``{"nvidia.com/hostdev": 8}``)."""
        self._nodes[name] = _NodeSpec(
            name,
            gpus,
            cpu_millis,
            memory,
            dict(labels or {}),
            flavor=flavor,
            topology=tuple(topology),
            extended=dict(extended or {}),
        )
        return self

    def cordoned(self, *names: str) -> Self:
        """Mark nodes cordoned by an admin: they take no new work."""
        return self._unschedulable(names, "cordoned")

    def unhealthy(self, *names: str, message: str = "unhealthy") -> Self:
        """Mark nodes failed by health checks: they take no new work."""
        return self._unschedulable(names, message)

    def _unschedulable(self, names: Iterable[str], reason: str) -> Self:
        for name in names:
            spec = self._nodes[name]
            spec.schedulable = False
            spec.unschedulable_reason = reason
        return self

    def build(
        self,
        running_gpus: Mapping[str, int | Sequence[int]] | None = None,
        running_cpu: Mapping[str, int] | None = None,
        running_memory: Mapping[str, int] | None = None,
    ) -> tuple[NodeView, ...]:
        """The nodes, with what is in use taken away from what is free.

        ``running_gpus`` maps a node to a count (its lowest GPU ids are in use) or to the GPU ids
        in use; ``running_cpu`` and ``running_memory`` map a node to millicores and bytes in use.
        """
        running_gpus = running_gpus or {}
        running_cpu = running_cpu or {}
        running_memory = running_memory or {}
        unknown = (set(running_gpus) | set(running_cpu) | set(running_memory)) - set(self._nodes)
        if unknown:
            raise ValueError(f"usage given for unknown nodes: {sorted(unknown)}")
        views = []
        for spec in self._nodes.values():
            used = running_gpus.get(spec.name, 0)
            used_ids = set(range(used)) if isinstance(used, int) else set(used)
            if not used_ids <= set(range(spec.gpus)):
                raise ValueError(f"node {spec.name} has GPUs 0..{spec.gpus - 1}, not {used}")
            views.append(
                node_view(
                    name=spec.name,
                    gpus=spec.gpus,
                    cpu_millis=spec.cpu_millis,
                    memory=spec.memory,
                    used_gpu_ids=used_ids,
                    used_cpu_millis=running_cpu.get(spec.name, 0),
                    used_memory=running_memory.get(spec.name, 0),
                    labels=spec.labels,
                    schedulable=spec.schedulable,
                    unschedulable_reason=spec.unschedulable_reason,
                    flavor=spec.flavor,
                    topology=spec.topology,
                    extended=spec.extended,
                )
            )
        return tuple(views)


@dataclass
class QueueBuilder:
    """A queue: unlimited and StrictFIFO unless told otherwise."""

    name: str
    _tenant: str = "default"
    _quota: int | None = None
    _in_use: int = 0
    _strategy: QueueStrategy = QueueStrategy.STRICT_FIFO
    _nominal: dict[str, int] | None = None
    _used: dict[str, int] = field(default_factory=dict)
    _cohort: str | None = None
    _borrowing: dict[str, int] = field(default_factory=dict)
    _lending: dict[str, int] = field(default_factory=dict)
    _weight: float = 1.0
    _extended: dict[str, dict[str, int]] = field(default_factory=dict)
    _scavenger: bool = False

    def tenant(self, name: str) -> Self:
        self._tenant = name
        return self

    def quota(self, gpus: int | None) -> Self:
        """GPU quota (None: no limit)."""
        self._quota = gpus
        return self

    def using(self, gpus: int) -> Self:
        """GPUs its admitted jobs hold now."""
        self._in_use = gpus
        return self

    def nominal(self, flavor: str, gpus: int) -> Self:
        """Nominal GPUs of a flavor (flavors are tried in the order they are given)."""
        self._nominal = {**(self._nominal or {}), flavor: gpus}
        return self

    def uses(self, flavor: str, gpus: int) -> Self:
        """GPUs of a flavor its admitted jobs hold (when not given by running jobs)."""
        self._used[flavor] = gpus
        return self

    def cohort(self, name: str) -> Self:
        self._cohort = name
        return self

    def limits(self, resource: str, amount: int, flavor: str = DEFAULT_FLAVOR) -> Self:
        """Nominal quota of an extended resource on a flavor (counted only in a queue that
        has a GPU quota: ``quota`` or ``nominal``)."""
        self._extended.setdefault(flavor, {})[resource] = amount
        return self

    def borrowing_limit(self, flavor: str, gpus: int) -> Self:
        self._borrowing[flavor] = gpus
        return self

    def lending_limit(self, flavor: str, gpus: int) -> Self:
        self._lending[flavor] = gpus
        return self

    def weight(self, value: float) -> Self:
        self._weight = value
        return self

    def strict(self) -> Self:
        self._strategy = QueueStrategy.STRICT_FIFO
        return self

    def best_effort(self) -> Self:
        self._strategy = QueueStrategy.BEST_EFFORT_FIFO
        return self

    def least_attained_service(self) -> Self:
        self._strategy = QueueStrategy.LEAST_ATTAINED_SERVICE
        return self

    def shortest_expected_service(self) -> Self:
        self._strategy = QueueStrategy.SHORTEST_EXPECTED_SERVICE
        return self

    def scavenger(self) -> Self:
        """Its jobs run on idle capacity only, preempted by any job needing their nodes."""
        self._scavenger = True
        return self

    def build(self, running: Iterable[RunningJob] = ()) -> QueueView:
        """The queue; GPUs used per flavor come from ``uses``/``using`` plus its running jobs."""
        nominal = self._nominal
        if nominal is None and self._quota is not None:
            nominal = {DEFAULT_FLAVOR: self._quota}
        used = dict(self._used)
        if self._in_use:
            used[DEFAULT_FLAVOR] = used.get(DEFAULT_FLAVOR, 0) + self._in_use
        extended_used: dict[str, dict[str, int]] = {}
        for r in running:
            if r.queue == self.name:
                for flavor, gpus in r.flavor_gpus.items():
                    used[flavor] = used.get(flavor, 0) + gpus
                for flavor, amounts in r.flavor_extended.items():
                    in_flavor = extended_used.setdefault(flavor, {})
                    for resource, amount in amounts:
                        in_flavor[resource] = in_flavor.get(resource, 0) + amount
        return QueueView(
            self.name,
            self._tenant,
            nominal=nominal,
            used=used,
            strategy=self._strategy,
            cohort=self._cohort,
            borrowing_limit=dict(self._borrowing),
            lending_limit=dict(self._lending),
            weight=self._weight,
            extended_nominal={f: dict(limits) for f, limits in self._extended.items()},
            extended_used=extended_used,
            scavenger=self._scavenger,
        )


def cluster() -> ClusterBuilder:
    """Start describing nodes."""
    return ClusterBuilder()


def queue(name: str) -> QueueBuilder:
    """Start describing a queue."""
    return QueueBuilder(name)


def snapshot(
    *,
    nodes: ClusterBuilder | Iterable[NodeView] = (),
    queues: Iterable[QueueBuilder | QueueView] | None = None,
    pending: Iterable[JobBuilder | PendingJob] = (),
    running_gpus: Mapping[str, int | Sequence[int]] | None = None,
    running_cpu: Mapping[str, int] | None = None,
    running_memory: Mapping[str, int] | None = None,
    now: float = 0.0,
    running: Iterable[RunningBuilder] = (),
    standings: Mapping[str, float] | None = None,
    restricted: Mapping[str, Iterable[str]] | None = None,
    topology_levels: tuple[str, ...] = (),
    member_standings: Mapping[tuple[str, str], float] | None = None,
    member_weights: Mapping[tuple[str, str], float] | None = None,
) -> Snapshot:
    """An immutable snapshot. With ``queues`` left out, every queue the jobs name exists,
    unlimited and StrictFIFO; pass ``queues=[]`` for none. Usage applies to a ``ClusterBuilder``.

    Running jobs take the lowest free GPU ids of their nodes (after ``running_gpus``) and count
    against their queues. Flavors are those of the nodes, in order of appearance;
    ``restricted`` limits a flavor to some queues. ``member_standings`` and
    ``member_weights`` are fair share's second level, per (tenant, member).
    """
    if isinstance(nodes, ClusterBuilder):
        node_views = nodes.build(running_gpus, running_cpu, running_memory)
    else:
        if running_gpus or running_cpu or running_memory:
            raise ValueError("give usage with a ClusterBuilder, not with built NodeViews")
        node_views = tuple(nodes)
    free_ids = {n.name: list(n.free_gpu_ids) for n in node_views}
    node_flavors = {n.name: n.flavor for n in node_views}
    running_jobs = tuple(r.build(free_ids, node_flavors) for r in running)
    if running_jobs:
        node_views = tuple(
            replace(
                n,
                free_gpu_ids=tuple(free_ids[n.name]),
                free_cpu_millis=n.free_cpu_millis - _held(running_jobs, n.name, "cpu"),
                free_memory=n.free_memory - _held(running_jobs, n.name, "memory"),
                free_extended=_free_extended(n, running_jobs),
            )
            for n in node_views
        )
    jobs = tuple(j.build() if isinstance(j, JobBuilder) else j for j in pending)
    if queues is None:
        names = sorted({j.queue for j in jobs} | {r.queue for r in running_jobs})
        queue_views = tuple(QueueBuilder(name).build(running_jobs) for name in names)
    else:
        queue_views = tuple(
            q.build(running_jobs) if isinstance(q, QueueBuilder) else q for q in queues
        )
    flavor_names = list(dict.fromkeys(n.flavor for n in node_views if n.flavor is not None))
    restricted = restricted or {}
    flavors = tuple(
        FlavorView(f, frozenset(restricted[f]) if f in restricted else None)
        for f in flavor_names or [DEFAULT_FLAVOR]
    )
    return Snapshot(
        now=now,
        nodes=node_views,
        queues=queue_views,
        pending=jobs,
        running=running_jobs,
        flavors=flavors,
        standings=dict(standings or {}),
        topology_levels=topology_levels,
        member_standings=dict(member_standings or {}),
        member_weights=dict(member_weights or {}),
    )


def _free_extended(node: NodeView, jobs: tuple[RunningJob, ...]) -> Mapping[str, int]:
    """What is free of the node's extended resources once the running jobs hold theirs."""
    if not node.extended:
        return node.free_extended
    free = dict(node.free_extended)
    for j in jobs:
        for r in j.replicas:
            if r.node == node.name:
                for resource, amount in r.extended:
                    free[resource] = free.get(resource, 0) - amount
    return free


def _held(jobs: tuple[RunningJob, ...], node: str, what: str) -> int:
    return sum(
        (r.cpu_millis if what == "cpu" else r.memory)
        for j in jobs
        for r in j.replicas
        if r.node == node
    )
