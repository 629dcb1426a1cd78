"""Node health on the control plane, reports in: a node agent's report is stored (each
condition with its streak, a history row on each change, the latest reading, where the agent is
and when it reported), and the reply tells the agent which job holds each GPU.

What the rules make of the stored conditions is ``kiban.services.remediation``'s; what each
control-loop pass does (silent agents, pending drains) is ``kiban.services.health_pass``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import httpx
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.health.conditions import Condition, ConditionStatus
from kiban.health.remediation import CordonSource
from kiban.health.report import GpuAllocation, NodeHealthReply, NodeHealthReport
from kiban.services import events
from kiban.services.errors import Conflict, Unavailable, invalid
from kiban.services.nodes import get_node
from kiban.store.models import Job, NodeCondition, NodeConditionChange, NodeReadingRow, Replica

AGENT_NOT_REPORTING = "AgentNotReporting"


class NodeHealthEvent(StrEnum):
    """Reasons of the node events written here."""

    CONDITION_CHANGED = "ConditionChanged"
    REMEDIATION = "Remediation"
    REMEDIATION_FAILED = "RemediationFailed"
    REMEDIATION_SUPPRESSED = "RemediationSuppressed"
    CORDONED = "Cordoned"
    RETURNED_TO_SERVICE = "ReturnedToService"


# -- ingest ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Ingested:
    """A stored report: the reply to the agent, and whether a rule could act on the node now
    (some condition not False, or a cordon of the rules' to lift); when not, ``remediate``
    need not run."""

    reply: NodeHealthReply
    worth_deciding: bool


def ingest(session: Session, name: str, report: NodeHealthReport, now: float) -> Ingested:
    """Store an agent's report on node ``name`` (NotFound; 422 when the reading names another
    node) and answer with the node's GPU allocations. The caller commits."""
    node = get_node(session, name)
    if report.reading.node != name:
        raise invalid(
            "reading.node", f"the report is for node {report.reading.node!r}, posted to {name!r}"
        )
    store_conditions(session, name, report.conditions, now)
    row = session.get(NodeReadingRow, name)
    reading = report.reading.model_dump(mode="json")
    if row is None:
        session.add(NodeReadingRow(node=name, taken_at=report.reading.taken_at, reading=reading))
    else:
        row.taken_at = report.reading.taken_at
        row.reading = reading
    node.agent_address = report.agent_address
    node.agent_reported_at = now
    problems = any(c.status is not ConditionStatus.FALSE for c in report.conditions)
    lift = node.cordoned and node.cordon_source == CordonSource.REMEDIATION.value
    reply = NodeHealthReply(allocations=allocations(session, name), interval_s=report.interval_s)
    return Ingested(reply, problems or lift)


def store_conditions(
    session: Session, node: str, conditions: Iterable[Condition], now: float
) -> list[str]:
    """Insert or update the node's conditions: the streak counts reports with the same status;
    the transition time is kept while the status stays (else the agent's, never later than
    now); each change of status or reason is a history row and an event. The types changed."""
    existing = {
        c.type: c for c in session.scalars(select(NodeCondition).where(NodeCondition.node == node))
    }
    changed: list[str] = []
    for condition in conditions:
        row = existing.get(condition.type.value)
        status = condition.status.value
        if row is None:
            row = NodeCondition(
                node=node,
                type=condition.type.value,
                status=status,
                reason=condition.reason,
                message=condition.message,
                last_transition_time=min(condition.last_transition_time, now),
                updated_at=now,
                streak=1,
            )
            session.add(row)
            existing[row.type] = row
            _changed(session, node, condition, now, first=True)
            changed.append(row.type)
            continue
        same_status = row.status == status
        if not same_status or row.reason != condition.reason:
            _changed(session, node, condition, now, first=False)
            changed.append(row.type)
        if same_status:
            row.streak += 1
        else:
            row.streak = 1
            row.last_transition_time = min(condition.last_transition_time, now)
        row.status = status
        row.reason = condition.reason
        row.message = condition.message
        row.updated_at = now
    return changed


def _changed(session: Session, node: str, condition: Condition, now: float, first: bool) -> None:
    session.add(
        NodeConditionChange(
            node=node,
            type=condition.type.value,
            status=condition.status.value,
            reason=condition.reason,
            message=condition.message,
            at=now,
        )
    )
    if first and condition.status is ConditionStatus.FALSE:
        return  # a check passing from the start is history, not news
    events.record(
        session,
        kind="Node",
        name=node,
        reason=NodeHealthEvent.CONDITION_CHANGED,
        message=f"{condition.type} {condition.status} ({condition.reason}): {condition.message}",
        at=now,
        warning=condition.failing,
    )


def allocations(session: Session, node: str) -> list[GpuAllocation]:
    """Which job holds each GPU of the node (active replicas' devices)."""
    rows = session.execute(
        select(Replica.gpu_ids, Job.id, Job.tenant, Job.queue)
        .join(Job, Job.id == Replica.job_id)
        .where(Replica.node == node, Replica.active.is_(True))
        .order_by(Job.id, Replica.rank)
    )
    return [
        GpuAllocation(gpu=int(gpu), job=job, tenant=tenant, queue=queue)
        for gpu_ids, job, tenant, queue in rows.all()
        for gpu in gpu_ids or ()
    ]


# -- asking the agent ----------------------------------------------------------------------------
AGENT_CHECK_TIMEOUT_S = 30.0


def agent_address(session: Session, name: str) -> str:
    """Where the node's agent serves ``/check`` (NotFound; Conflict when none is known)."""
    node = get_node(session, name)
    if not node.agent_address:
        raise Conflict(f"node {name} has no known node agent (none has reported an address)")
    return node.agent_address


def ask_agent(
    address: str, name: str, timeout_s: float = AGENT_CHECK_TIMEOUT_S
) -> NodeHealthReport:
    """``POST http://{address}/check?node={name}``: the agent runs every check now and answers
    its report (Unavailable when it does not answer in time or answers nonsense). Called with
    no transaction open."""
    try:
        response = httpx.post(f"http://{address}/check", params={"node": name}, timeout=timeout_s)
        response.raise_for_status()
        return NodeHealthReport.model_validate_json(response.content)
    except httpx.HTTPError as exc:
        raise Unavailable(f"the node agent of {name} at {address} did not answer: {exc}") from None
    except ValidationError as exc:
        count = exc.error_count()
        raise Unavailable(
            f"the node agent of {name} at {address} answered a report kiban cannot read "
            f"({count} problem(s))"
        ) from None
