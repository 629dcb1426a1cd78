"""Node agents' reports built in a line, for tests and ``kiban bench health``: every check
passing except the faults named."""

from __future__ import annotations

from collections.abc import Mapping

from kiban.health.conditions import CheckType, Condition, ConditionStatus
from kiban.health.readings import NodeReading
from kiban.health.report import NodeHealthReport


def health_report(
    node: str,
    at: float,
    faults: Mapping[CheckType, str] | None = None,
    *,
    status: ConditionStatus = ConditionStatus.TRUE,
    interval_s: float = 30.0,
    agent_address: str = "",
) -> NodeHealthReport:
    """A report taken at ``at``: each check in ``faults`` at ``status`` with its message (the
    reading), every other check False."""
    faults = faults or {}
    conditions = [
        Condition(
            type=check,
            status=status if check in faults else ConditionStatus.FALSE,
            reason=f"{check.value}Failed" if check in faults else f"{check.value}Ok",
            message=faults.get(check, ""),
            last_transition_time=at,
        )
        for check in CheckType
    ]
    reading = NodeReading(node=node, taken_at=at, nvml_available=True)
    return NodeHealthReport(
        reading=reading,
        conditions=conditions,
        agent_address=agent_address,
        interval_s=interval_s,
    )
