"""The immutable picture of the cluster that the core decides on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class QueueStrategy(StrEnum):
    """StrictFIFO: the head blocks its queue. BestEffortFIFO: others may pass a stuck head."""

    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


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
) -> NodeView:
    """A node's view from its capacity and what running replicas use of it."""
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
    )


@dataclass(frozen=True, slots=True)
class QueueView:
    """A queue: its GPU quota (None = unlimited), what its admitted jobs use, its ordering."""

    name: str
    tenant: str
    gpu_quota: int | None
    gpus_in_use: int = 0
    strategy: QueueStrategy = QueueStrategy.STRICT_FIFO


@dataclass(frozen=True, slots=True)
class TaskDemand:
    """What each replica of one task needs."""

    name: str
    replicas: int
    gpu: int
    cpu_millis: int
    memory: int


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting for admission; ``gang_size`` replicas must start together."""

    id: str
    queue: str
    priority: int
    submitted_at: float
    tasks: tuple[TaskDemand, ...]
    gang_size: int

    @property
    def total_replicas(self) -> int:
        return sum(t.replicas for t in self.tasks)

    @property
    def total_gpus(self) -> int:
        return sum(t.replicas * t.gpu for t in self.tasks)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one scheduling cycle needs, taken at ``now``."""

    now: float
    nodes: tuple[NodeView, ...]
    queues: tuple[QueueView, ...]
    pending: tuple[PendingJob, ...]
