"""The pure scheduler core: snapshot in, decisions out; no I/O, no clock reads."""

from kiban.scheduler.core import schedule
from kiban.scheduler.decisions import Admit, Decisions, ReplicaPlacement, Wait
from kiban.scheduler.reasons import PendingReason, ReasonCode
from kiban.scheduler.snapshot import NodeView, PendingJob, QueueView, Snapshot, TaskDemand

__all__ = [
    "Admit",
    "Decisions",
    "NodeView",
    "PendingJob",
    "PendingReason",
    "QueueView",
    "ReasonCode",
    "ReplicaPlacement",
    "Snapshot",
    "TaskDemand",
    "Wait",
    "schedule",
]
