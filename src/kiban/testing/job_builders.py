"""Fluent builders of pending and running jobs for scheduler snapshots (see ``builders``).

Both kinds share what a job is whatever its state (queue, tenant, member, priority, times, run
time limits, attained service), set through one base; each adds what only its state has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Self

from kiban.scheduler.node_match import NodeConstraint, NodePreference, excluding
from kiban.scheduler.snapshot import (
    Extended,
    PendingJob,
    RunningJob,
    RunningReplica,
    TaskDemand,
    TopologyRequest,
    extended_of,
)

GIB = 2**30


@dataclass
class _JobBase:
    """What a pending and a running job both carry, with one setter each."""

    id: str
    _queue: str = "default"
    _tenant: str = "default"
    _member: str | None = None
    _priority: int = 0
    _submitted_at: float = 0.0
    _max_runtime: float | None = None
    _estimated_runtime: float | None = None
    _preempted_by: str | None = None
    _attained: float = 0.0

    def queue(self, name: str) -> Self:
        self._queue = name
        return self

    def tenant(self, name: str) -> Self:
        self._tenant = name
        return self

    def member(self, name: str | None) -> Self:
        """Who in its tenant submitted it (fair share's second level)."""
        self._member = name
        return self

    def priority(self, value: int) -> Self:
        self._priority = value
        return self

    def submitted(self, at: float) -> Self:
        self._submitted_at = at
        return self

    def max_runtime(self, seconds: float) -> Self:
        self._max_runtime = seconds
        return self

    def estimated_runtime(self, seconds: float) -> Self:
        """Its run time estimated from history (it has no maxRuntime): plans only."""
        self._estimated_runtime = seconds
        return self

    def preempted_by(self, job_id: str) -> Self:
        """This job preempted it: a pending job ran and returned to its queue, a running one
        is stopping."""
        self._preempted_by = job_id
        return self

    def attained(self, gpu_seconds: float) -> Self:
        """GPU-seconds its earlier attempts ran (least-attained-service order)."""
        self._attained = gpu_seconds
        return self


@dataclass
class JobBuilder(_JobBase):
    """A pending job; ``replicas`` shapes the single task, ``task`` adds tasks one by one."""

    _tasks: list[TaskDemand] = field(default_factory=list)
    _gang: int | None = None
    _topology: TopologyRequest | None = None
    _preempts: bool = False
    _nominated: tuple[str, ...] = ()
    _excluded: frozenset[str] = frozenset()

    def nominated(self, *nodes: str) -> Self:
        """Victims were stopped for it on these nodes (they are kept for it)."""
        self._nominated = nodes
        return self

    def topology(self, level: str, *, required: bool = True) -> Self:
        self._topology = TopologyRequest(level, required)
        return self

    def excluding(self, *nodes: str) -> Self:
        """It must keep off these nodes (they failed its preflight), in every task."""
        self._excluded = self._excluded | frozenset(nodes)
        return self

    def preempts(self, value: bool = True) -> Self:
        """Its priority class may preempt lower priorities (PreemptLowerPriority)."""
        self._preempts = value
        return self

    def replicas(
        self,
        count: int,
        *,
        gpu: int = 1,
        cpu_millis: int = 1000,
        memory: int = GIB,
        nodes: NodeConstraint | None = None,
        prefers: NodePreference | None = None,
        max_per_node: int | None = None,
        extended: Mapping[str, int] | None = None,
    ) -> Self:
        """Make the job one task ``worker`` of ``count`` replicas, each needing this much, at
        most ``max_per_node`` of them on a node (None: no limit)."""
        self._tasks = []
        return self.task(
            "worker",
            count,
            gpu=gpu,
            cpu_millis=cpu_millis,
            memory=memory,
            nodes=nodes,
            prefers=prefers,
            max_per_node=max_per_node,
            extended=extended,
        )

    def task(
        self,
        name: str,
        replicas: int = 1,
        *,
        gpu: int = 1,
        cpu_millis: int = 1000,
        memory: int = GIB,
        nodes: NodeConstraint | None = None,
        prefers: NodePreference | None = None,
        max_per_node: int | None = None,
        extended: Mapping[str, int] | None = None,
    ) -> Self:
        """Add a task (ranks follow the order tasks were added)."""
        self._tasks.append(
            TaskDemand(
                name,
                replicas,
                gpu,
                cpu_millis,
                memory,
                nodes,
                prefers,
                max_per_node,
                extended_of(extended or {}),
            )
        )
        return self

    def gang(self, size: int) -> Self:
        """Replicas that must start together (default: all)."""
        self._gang = size
        return self

    def build(self) -> PendingJob:
        tasks = tuple(self._tasks) or (TaskDemand("worker", 1, 1, 1000, GIB),)
        if self._excluded:
            tasks = tuple(replace(t, nodes=excluding(t.nodes, self._excluded)) for t in tasks)
        total = sum(t.replicas for t in tasks)
        return PendingJob(
            id=self.id,
            queue=self._queue,
            priority=self._priority,
            submitted_at=self._submitted_at,
            tasks=tasks,
            gang_size=self._gang if self._gang is not None else total,
            tenant=self._tenant,
            max_runtime=self._max_runtime,
            topology=self._topology,
            preempts=self._preempts,
            preempted_by=self._preempted_by,
            nominated_nodes=self._nominated,
            member=self._member,
            estimated_runtime=self._estimated_runtime,
            attained_service=self._attained,
        )


@dataclass
class RunningBuilder(_JobBase):
    """A running job: replicas on named nodes; GPU ids are assigned when the snapshot is built."""

    _started_at: float = 0.0
    _checkpoint: float | None = None
    _protected_until: float = 0.0
    _replicas: list[tuple[str, int, Extended]] = field(default_factory=list)

    def started(self, at: float) -> Self:
        self._started_at = at
        return self

    def checkpointed(self, at: float) -> Self:
        self._checkpoint = at
        return self

    def protected_until(self, at: float) -> Self:
        self._protected_until = at
        return self

    def on(
        self,
        node: str,
        gpus: int = 1,
        replicas: int = 1,
        extended: Mapping[str, int] | None = None,
    ) -> Self:
        """``replicas`` replicas of ``gpus`` GPUs (and ``extended`` resources) each on ``node``."""
        self._replicas.extend([(node, gpus, extended_of(extended or {}))] * replicas)
        return self

    def build(
        self, free_ids: dict[str, list[int]], flavors: Mapping[str, str | None]
    ) -> RunningJob:
        replicas = []
        flavor_gpus: dict[str, int] = {}
        flavor_extended: dict[str, dict[str, int]] = {}
        for node, gpus, extended in self._replicas:
            ids = free_ids[node][:gpus]
            if len(ids) < gpus:
                raise ValueError(f"node {node} has no {gpus} free GPUs left for {self.id}")
            del free_ids[node][:gpus]
            replicas.append(RunningReplica(node, tuple(ids), 1000, GIB, extended))
            flavor = flavors[node]
            if flavor is not None:
                flavor_gpus[flavor] = flavor_gpus.get(flavor, 0) + gpus
                held = flavor_extended.setdefault(flavor, {})
                for resource, amount in extended:
                    held[resource] = held.get(resource, 0) + amount
        return RunningJob(
            id=self.id,
            queue=self._queue,
            tenant=self._tenant,
            priority=self._priority,
            submitted_at=self._submitted_at,
            started_at=self._started_at,
            replicas=tuple(replicas),
            flavor_gpus=flavor_gpus,
            flavor_extended={f: extended_of(held) for f, held in flavor_extended.items() if held},
            max_runtime=self._max_runtime,
            last_progress_at=self._checkpoint,
            protected_until=self._protected_until,
            preempted_by=self._preempted_by,
            member=self._member,
            estimated_runtime=self._estimated_runtime,
            attained_service=self._attained,
        )


def job(job_id: str) -> JobBuilder:
    """Start describing a pending job."""
    return JobBuilder(job_id)


def running(job_id: str) -> RunningBuilder:
    """Start describing a running job."""
    return RunningBuilder(job_id)
