"""Node conditions in node-problem-detector's shape: ``status`` True means the problem is there.

A check gives one condition per node; the control plane keeps each with its history, and on
Kubernetes the agent writes them on the Node object so they look like NPD's.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from kiban.domain.check_types import CheckType

__all__ = ["WARNING_ONLY", "CheckType", "Condition", "ConditionStatus"]


class ConditionStatus(StrEnum):
    """NPD's statuses: True (the problem is present), False (it is not), Unknown (cannot tell)."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


# Checks whose True status is a warning (recorded and shown), not a failure of the node.
WARNING_ONLY = frozenset({CheckType.GPU_THERMAL})


class Condition(BaseModel):
    """One check's verdict on one node (the fields of a Kubernetes NodeCondition)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    type: CheckType
    status: ConditionStatus
    reason: str = Field(max_length=128)  # CamelCase, as Kubernetes reasons are
    message: str = ""
    last_transition_time: float = Field(alias="lastTransitionTime")

    @property
    def failing(self) -> bool:
        """True when the problem is present and is more than a warning."""
        return self.status is ConditionStatus.TRUE and self.type not in WARNING_ONLY
