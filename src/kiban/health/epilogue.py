"""The epilogue check, pure: did a failed job's nodes see a new Xid or ECC event while it ran?

A node that did is cordoned pending a check (its next healthy report ends the cordon), so a
GPU that may have caused the failure gets no more work before it is looked at.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kiban.health.conditions import WARNING_ONLY, CheckType, ConditionStatus
from kiban.health.readings import NodeReading

EPILOGUE_CHECKS = frozenset({CheckType.GPU_XID, CheckType.GPU_ECC})
"""The conditions whose new failures during a job make its failure suspect."""

EPILOGUE_RULE = "epilogue"
"""The rule named in remediation actions the epilogue takes."""


@dataclass(frozen=True, slots=True)
class ConditionChange:
    """A row of a node's condition history."""

    node: str
    type: str
    status: str
    reason: str
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class Finding:
    """A node that saw a new Xid or ECC event while the job ran, and what it saw."""

    node: str
    check: CheckType
    what: str
    at: float


def findings(
    nodes: Iterable[str],
    started_at: float,
    ended_at: float,
    changes: Iterable[ConditionChange],
    readings: Iterable[NodeReading],
) -> list[Finding]:
    """The events of the job's nodes within ``[started_at, ended_at]``: a GpuXid or GpuEcc
    condition turning True, and Xid events in the latest readings; one finding per node (its
    earliest event)."""
    placed = set(nodes)
    found: dict[str, Finding] = {}

    def keep(finding: Finding) -> None:
        known = found.get(finding.node)
        if known is None or finding.at < known.at:
            found[finding.node] = finding

    for change in changes:
        if change.node not in placed or not started_at <= change.at <= ended_at:
            continue
        if change.status != ConditionStatus.TRUE.value:
            continue
        try:
            check = CheckType(change.type)
        except ValueError:
            continue
        if check in EPILOGUE_CHECKS:
            detail = f": {change.message}" if change.message else ""
            keep(Finding(change.node, check, f"{check.value} {change.reason}{detail}", change.at))
    for reading in readings:
        if reading.node not in placed:
            continue
        for gpu in reading.gpus:
            for xid in gpu.xids:
                if started_at <= xid.at <= ended_at:
                    what = f"GpuXid: Xid {xid.code} on GPU {gpu.index}"
                    keep(Finding(reading.node, CheckType.GPU_XID, what, xid.at))
    return [found[n] for n in sorted(found)]


def may_return(
    conditions: Iterable[tuple[str, str]], reported_at: float | None, since: float
) -> bool:
    """Whether a node cordoned by the epilogue at ``since`` returns to service: its agent has
    reported after that, and none of its conditions (type, status) is failing."""
    if reported_at is None or reported_at <= since:
        return False
    for type_, status in conditions:
        if status != ConditionStatus.TRUE.value:
            continue
        if type_ in {c.value for c in WARNING_ONLY}:
            continue  # a warning, not a failure
        return False
    return True
