"""Typed answers to "why is this job not running?", each with the numbers behind it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kiban.scheduler import units
from kiban.scheduler.snapshot import TaskDemand


class ReasonCode(StrEnum):
    """Why a job waits. One code per decision path of the core."""

    QUEUE_NOT_FOUND = "QueueNotFound"
    FLAVOR_NOT_ALLOWED = "FlavorNotAllowed"  # only flavors its queue may not use could hold it
    EXCEEDS_QUEUE_QUOTA = "ExceedsQueueQuota"  # more than the queue could ever have, borrowing too
    QUEUE_QUOTA_EXHAUSTED = "QueueQuotaExhausted"  # fits the quota, but it is in use now
    COHORT_EXHAUSTED = "CohortExhausted"  # needs to borrow, and the cohort cannot lend enough
    NO_NODE_FITS = "NoNodeFits"  # no schedulable node could hold a replica even when idle
    TOPOLOGY_UNSATISFIABLE = "TopologyUnsatisfiable"  # no domain of the level can hold the gang
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"  # the gang does not fit in free capacity now
    WAITING_FOR_RESERVATION = "WaitingForReservation"  # GPUs reserved for it from a known time
    BLOCKED_BY_RESERVATION = "BlockedByReservation"  # starting now would delay a reservation
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"  # victims are stopping to make room for it
    BLOCKED_BY_QUEUE_HEAD = "BlockedByQueueHead"  # StrictFIFO: an older job heads the queue
    UNSCHEDULABLE = "Unschedulable"  # could never start, even on idle nodes: holds up nobody
    QUEUE_BACKLOG = "QueueBacklog"  # behind the jobs of its queue that each pass considers
    # Held before scheduling (kiban.control.gates), never given by the core itself:
    WAITING_FOR_DEPENDENCY = "WaitingForDependency"  # a job (or array) of its dependsOn runs on
    WAITING_FOR_ARRAY_SLOT = "WaitingForArraySlot"  # its array runs its parallelism already
    BUDGET_EXHAUSTED = "BudgetExhausted"  # its tenant's budget is used up (or would be by it)


def counted(count: int, noun: str) -> str:
    """ "1 replica", "3 replicas": what a reason says reads as a sentence."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def gpus(count: int, flavor: str) -> str:
    """ "4 GPUs", or "4 h100 GPUs" when the cluster declares flavors."""
    return counted(count, "GPU" if flavor == "default" else f"{flavor} GPU")


def cpus(millis: int) -> str:
    """ "1 CPU", "2 CPUs", "0.5 CPUs"."""
    count = units.cpus(millis)
    return f"{count} CPU" if count == "1" else f"{count} CPUs"


def replica_size(task: TaskDemand) -> str:
    """What one replica of a task asks for: "1 GPU, 2 CPUs, 16 GiB of memory"."""
    memory = units.size(task.memory)
    size = f"{counted(task.gpu, 'GPU')}, {cpus(task.cpu_millis)}, {memory} of memory"
    for name, amount in task.extended:
        size += f", {extended_amount(name, amount)}"
    return size


def extended_amount(name: str, amount: int) -> str:
    """ "8 nvidia.com/hostdev", "1 GiB of hugepages-2Mi" (hugepages are counted in bytes)."""
    if name.startswith("hugepages-"):
        return f"{units.size(amount)} of {name}"
    return f"{amount} {name}"


def spread_phrase(nodes: int, task: TaskDemand, limit: int) -> str:
    """ "3 nodes with 1 free GPU each for one replica per node": what a task that limits its
    replicas per node asks of the nodes."""
    if task.gpu:
        room = f"{counted(task.gpu, 'free GPU')} each"
    else:
        room = f"room for a replica ({replica_size(task)}) each"
    per_node = "one replica per node" if limit == 1 else f"at most {limit} replicas per node"
    return f"{counted(nodes, 'node')} with {room} for {per_node}"


SCHEDULING_WINDOW = 256
"""Pending jobs per queue that one scheduling pass considers, in the queue's order."""


@dataclass(frozen=True)
class PendingReason:
    """A reason code, a sentence with the numbers, and the numbers themselves for machines."""

    code: ReasonCode
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message, "details": self.details}


def awaiting_pass(queue: str, window: int = SCHEDULING_WINDOW) -> PendingReason:
    """The reason of a pending job no pass has judged yet: just submitted, or in the backlog.

    Given at read time rather than written by each pass, so a long backlog costs the scheduler
    no writes.
    """
    return PendingReason(
        ReasonCode.QUEUE_BACKLOG,
        f"not yet considered by a scheduling pass: each pass looks at the first {window} "
        f"pending jobs of queue {queue}, in order",
        {"queue": queue, "window": window},
    )
