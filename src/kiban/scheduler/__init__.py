"""The pure scheduler core: snapshot in, decisions out; no I/O, no clock reads.

The names below are loaded on first use, so that importing one small module of the package
(``node_match``, ``units``, ``reasons``) does not load the whole core.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiban.scheduler.core import schedule
    from kiban.scheduler.decisions import Admit, Decisions, ReplicaPlacement, Wait
    from kiban.scheduler.reasons import PendingReason, ReasonCode
    from kiban.scheduler.snapshot import NodeView, PendingJob, QueueView, Snapshot, TaskDemand

_WHERE = {
    "schedule": "core",
    "Admit": "decisions",
    "Decisions": "decisions",
    "ReplicaPlacement": "decisions",
    "Wait": "decisions",
    "PendingReason": "reasons",
    "ReasonCode": "reasons",
    "NodeView": "snapshot",
    "PendingJob": "snapshot",
    "QueueView": "snapshot",
    "Snapshot": "snapshot",
    "TaskDemand": "snapshot",
}

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
