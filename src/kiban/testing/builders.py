"""Small fluent builders of scheduler snapshots, for tables of test cases.

    nodes = cluster().nodes(3, gpus=2).node("big", gpus=8).cordoned("node-1")
    jobs = [job("a").queue("q").replicas(3, gpu=2).gang(2).priority(10).submitted(5.0)]
    snap = snapshot(nodes=nodes, queues=[queue("q").quota(4).strict()], pending=jobs,
                    running_gpus={"node-0": 1})

Defaults make GPUs the binding resource: nodes have plenty of CPU and memory, and a job is one
replica of one task ``worker`` needing 1 GPU, 1 CPU and 1 GiB.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Self

from kiban.scheduler.snapshot import (
    DEFAULT_FLAVOR,
    NodeView,
    PendingJob,
    QueueStrategy,
    QueueView,
    Snapshot,
    TaskDemand,
    node_view,
)

GIB = 2**30
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
    ) -> Self:
        """Add ``count`` alike nodes named ``{prefix}-{i}`` with the lowest unused numbers."""
        i = 0
        for _ in range(count):
            while f"{prefix}-{i}" in self._nodes:
                i += 1
            self.node(
                f"{prefix}-{i}", gpus=gpus, cpu_millis=cpu_millis, memory=memory, labels=labels
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
    ) -> Self:
        """Add one node (or replace the one of that name)."""
        self._nodes[name] = _NodeSpec(name, gpus, cpu_millis, memory, dict(labels or {}))
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

    def strict(self) -> Self:
        self._strategy = QueueStrategy.STRICT_FIFO
        return self

    def best_effort(self) -> Self:
        self._strategy = QueueStrategy.BEST_EFFORT_FIFO
        return self

    def build(self) -> QueueView:
        return QueueView(
            self.name,
            self._tenant,
            nominal=None if self._quota is None else {DEFAULT_FLAVOR: self._quota},
            used={DEFAULT_FLAVOR: self._in_use} if self._in_use else {},
            strategy=self._strategy,
        )


@dataclass
class JobBuilder:
    """A pending job; ``replicas`` shapes the single task, ``task`` adds tasks one by one."""

    id: str
    _queue: str = "default"
    _priority: int = 0
    _submitted_at: float = 0.0
    _tasks: list[TaskDemand] = field(default_factory=list)
    _gang: int | None = None

    def queue(self, name: str) -> Self:
        self._queue = name
        return self

    def priority(self, value: int) -> Self:
        self._priority = value
        return self

    def submitted(self, at: float) -> Self:
        self._submitted_at = at
        return self

    def replicas(
        self, count: int, *, gpu: int = 1, cpu_millis: int = 1000, memory: int = GIB
    ) -> Self:
        """Make the job one task ``worker`` of ``count`` replicas, each needing this much."""
        self._tasks = [TaskDemand("worker", count, gpu, cpu_millis, memory)]
        return self

    def task(
        self,
        name: str,
        replicas: int = 1,
        *,
        gpu: int = 1,
        cpu_millis: int = 1000,
        memory: int = GIB,
    ) -> Self:
        """Add a task (ranks follow the order tasks were added)."""
        self._tasks.append(TaskDemand(name, replicas, gpu, cpu_millis, memory))
        return self

    def gang(self, size: int) -> Self:
        """Replicas that must start together (default: all)."""
        self._gang = size
        return self

    def build(self) -> PendingJob:
        tasks = tuple(self._tasks) or (TaskDemand("worker", 1, 1, 1000, GIB),)
        total = sum(t.replicas for t in tasks)
        return PendingJob(
            id=self.id,
            queue=self._queue,
            priority=self._priority,
            submitted_at=self._submitted_at,
            tasks=tasks,
            gang_size=self._gang if self._gang is not None else total,
        )


def cluster() -> ClusterBuilder:
    """Start describing nodes."""
    return ClusterBuilder()


def queue(name: str) -> QueueBuilder:
    """Start describing a queue."""
    return QueueBuilder(name)


def job(job_id: str) -> JobBuilder:
    """Start describing a pending job."""
    return JobBuilder(job_id)


def snapshot(
    *,
    nodes: ClusterBuilder | Iterable[NodeView] = (),
    queues: Iterable[QueueBuilder | QueueView] | None = None,
    pending: Iterable[JobBuilder | PendingJob] = (),
    running_gpus: Mapping[str, int | Sequence[int]] | None = None,
    running_cpu: Mapping[str, int] | None = None,
    running_memory: Mapping[str, int] | None = None,
    now: float = 0.0,
) -> Snapshot:
    """An immutable snapshot. With ``queues`` left out, every queue the jobs name exists,
    unlimited and StrictFIFO; pass ``queues=[]`` for none. Usage applies to a ``ClusterBuilder``.
    """
    if isinstance(nodes, ClusterBuilder):
        node_views = nodes.build(running_gpus, running_cpu, running_memory)
    else:
        if running_gpus or running_cpu or running_memory:
            raise ValueError("give usage with a ClusterBuilder, not with built NodeViews")
        node_views = tuple(nodes)
    jobs = tuple(j.build() if isinstance(j, JobBuilder) else j for j in pending)
    if queues is None:
        names = sorted({j.queue for j in jobs})
        queue_views = tuple(QueueView(name, "default", None) for name in names)
    else:
        queue_views = tuple(q.build() if isinstance(q, QueueBuilder) else q for q in queues)
    return Snapshot(now=now, nodes=node_views, queues=queue_views, pending=jobs)
