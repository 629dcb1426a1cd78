"""Node health on the control plane, reports in: a node agent's report is stored (each
condition with its streak, a history row on each change, the latest reading, where the agent is
and when it reported), and the reply tells the agent which job holds each GPU. An agent's
reports on several nodes are taken together (``ingest_batch``), all or none.

What the rules make of the stored conditions is ``kiban.services.remediation``'s; what each
control-loop pass does (silent agents, pending drains) is ``kiban.services.health_pass``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple, cast

import httpx
from pydantic import ValidationError
from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session

from kiban.health.conditions import Condition, ConditionStatus
from kiban.health.readings import NodeReading
from kiban.health.remediation import CordonSource
from kiban.health.report import GpuAllocation, NodeHealthReply, NodeHealthReport
from kiban.services import events
from kiban.services.errors import Conflict, NotFound, Unavailable, invalid
from kiban.services.nodes import get_node, node_name_plausible
from kiban.store.models import Base, Job, Replica
from kiban.store.models_nodes import Node, NodeCondition, NodeConditionChange, NodeReadingRow

AGENT_NOT_REPORTING = "AgentNotReporting"

# Written with statements of their tables: cheaper than the ORM's bulk UPDATE (see ingest).
NODES = cast(Table, Node.__table__)
CONDITIONS = cast(Table, NodeCondition.__table__)
READINGS = cast(Table, NodeReadingRow.__table__)
REPLICAS = cast(Table, Replica.__table__)
JOBS = cast(Table, Job.__table__)

# The statements every report runs, built once (building one costs about what running it does
# on SQLite); the parameters are bound per call.
_MARK_REPORTED = (
    update(NODES)
    .where(NODES.c.name == bindparam("node_name"))
    .values(agent_address=bindparam("address"), agent_reported_at=bindparam("reported_at"))
    .returning(NODES.c.cordoned, NODES.c.cordon_source)
)
_READ_READING = select(READINGS.c.reading).where(READINGS.c.node == bindparam("node_name"))
_READ_CONDITIONS = select(
    CONDITIONS.c.type,
    CONDITIONS.c.status,
    CONDITIONS.c.reason,
    CONDITIONS.c.message,
    CONDITIONS.c.last_transition_time,
    CONDITIONS.c.streak,
).where(CONDITIONS.c.node == bindparam("node_name"))
_COUNT_STREAKS = (
    update(CONDITIONS)
    .where(
        CONDITIONS.c.node == bindparam("node_name"),
        CONDITIONS.c.type.in_(bindparam("kinds", expanding=True)),
    )
    .values(streak=CONDITIONS.c.streak + bindparam("bumps"), updated_at=bindparam("updated"))
)
_ALLOCATIONS = (
    select(REPLICAS.c.node, REPLICAS.c.gpu_ids, JOBS.c.id, JOBS.c.tenant, JOBS.c.queue)
    .join_from(REPLICAS, JOBS, JOBS.c.id == REPLICAS.c.job_id)
    .where(
        REPLICAS.c.node.in_(bindparam("nodes", expanding=True)),
        REPLICAS.c.active.is_(True),
    )
    .order_by(JOBS.c.id, REPLICAS.c.rank)
)


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
    node) and answer with the node's GPU allocations. The caller commits.

    A report like the last one costs a few statements and no ORM objects: one UPDATE of the
    node (that also reads its cordon), one read and one UPDATE of its conditions' streaks, the
    reading's time alone, and the allocations."""
    if report.reading.node != name:
        get_node(session, name)  # NotFound comes first
        raise invalid(
            "reading.node", f"the report is for node {report.reading.node!r}, posted to {name!r}"
        )
    worth_deciding = _take(session, name, report, now)
    reply = NodeHealthReply(allocations=allocations(session, name), interval_s=report.interval_s)
    return Ingested(reply, worth_deciding)


def ingest_batch(
    session: Session, reports: Sequence[NodeHealthReport], now: float
) -> list[Ingested]:
    """Store several nodes' reports (each node at most once), in order; what ``ingest`` gives
    for each. All or none: a report refused (a node twice, a node that does not exist) is a
    422 naming its index (``reports[3].reading.node``) and the caller commits nothing. The
    allocations of every node are read in one query."""
    first: dict[str, int] = {}
    for index, report in enumerate(reports):
        node = report.reading.node
        if node in first:
            raise invalid(
                f"reports[{index}].reading.node",
                f"node {node!r} is reported twice in one batch (also reports[{first[node]}])",
            )
        first[node] = index
    worth: list[bool] = []
    for index, report in enumerate(reports):
        try:
            worth.append(_take(session, report.reading.node, report, now))
        except NotFound as exc:
            raise invalid(f"reports[{index}].reading.node", exc.message) from None
    held = allocations_of(session, list(first))
    return [
        Ingested(
            NodeHealthReply(allocations=held.get(r.reading.node, []), interval_s=r.interval_s), w
        )
        for r, w in zip(reports, worth, strict=True)
    ]


def _take(session: Session, name: str, report: NodeHealthReport, now: float) -> bool:
    """Store the report of node ``name`` (NotFound); whether a rule could act on it now."""
    cordoned, cordon_source = _mark_reported(session, name, report.agent_address, now)
    store_conditions(session, name, report.conditions, now)
    store_reading(session, report.reading)
    problems = any(c.status is not ConditionStatus.FALSE for c in report.conditions)
    lift = cordoned and cordon_source == CordonSource.REMEDIATION.value
    return problems or lift


def _mark_reported(session: Session, name: str, address: str, now: float) -> tuple[bool, str]:
    """Record where the node's agent is and that it reported now, in one statement that also
    answers the node's cordon (NotFound when there is no such node)."""
    if not node_name_plausible(name):
        get_node(session, name)  # raises NotFound without asking the store
    session.flush()  # the statements below are the store's, not the session's
    marked = session.execute(
        _MARK_REPORTED, {"node_name": name, "address": address, "reported_at": now}
    ).first()
    if marked is None:
        raise NotFound(f"node {name} not found")
    _expire_loaded(session, Node, [name])
    return bool(marked.cordoned), str(marked.cordon_source)


def store_reading(session: Session, reading: NodeReading) -> None:
    """Keep ``reading`` as its node's latest. The JSON is rewritten only when more than
    ``taken_at`` changed; the row's ``taken_at`` column is always the latest (read the row
    with ``stored_reading``)."""
    content = reading.model_dump(mode="json")
    session.flush()
    row = session.execute(_READ_READING, {"node_name": reading.node}).first()
    if row is None:
        session.add(NodeReadingRow(node=reading.node, taken_at=reading.taken_at, reading=content))
        return
    values: dict[str, Any] = {"taken_at": reading.taken_at}
    if not _same_but_time(row.reading, content):
        values["reading"] = content
    session.execute(update(READINGS).where(READINGS.c.node == reading.node).values(**values))
    _expire_loaded(session, NodeReadingRow, [reading.node])


def _same_but_time(stored: Mapping[str, Any], content: Mapping[str, Any]) -> bool:
    keys = set(stored) | set(content)
    keys.discard("taken_at")
    return all(stored.get(key) == content.get(key) for key in keys)


def stored_reading(row: NodeReadingRow) -> NodeReading:
    """The node's latest reading as stored by ``store_reading``: its JSON, at the row's time
    (the JSON keeps the time its content was first read; ValidationError when not a reading)."""
    return NodeReading.model_validate({**row.reading, "taken_at": row.taken_at})


class _Kept(NamedTuple):
    """A condition as stored; ``bumps`` counts the reports that only added to its streak since
    it was read (None once anything else about it changed: the row is written whole)."""

    status: str
    reason: str
    message: str
    since: float  # last_transition_time
    streak: int
    bumps: int | None = 0


def store_conditions(
    session: Session, node: str, conditions: Iterable[Condition], now: float
) -> list[str]:
    """Insert or update the node's conditions: the streak counts reports with the same status;
    the transition time is kept while the status stays (else the agent's, never later than
    now); each change of status or reason is a history row and an event. The types changed.

    The conditions a report leaves as they were (status, reason and message) cost one UPDATE
    together, their streaks counted in the store."""
    session.flush()
    loaded = {
        kind: _Kept(status, reason, message, since, streak)
        for kind, status, reason, message, since, streak in session.execute(
            _READ_CONDITIONS, {"node_name": node}
        )
    }
    kept = dict(loaded)
    changed: list[str] = []
    for condition in conditions:
        kind, status = condition.type.value, condition.status.value
        row = kept.get(kind)
        since = min(condition.last_transition_time, now)
        if row is None:
            kept[kind] = _Kept(status, condition.reason, condition.message, since, 1, None)
            _changed(session, node, condition, now, first=True)
            changed.append(kind)
            continue
        same_status = row.status == status
        if not same_status or row.reason != condition.reason:
            _changed(session, node, condition, now, first=False)
            changed.append(kind)
        as_it_was = same_status and (row.reason, row.message) == (
            condition.reason,
            condition.message,
        )
        bumps = row.bumps + 1 if as_it_was and row.bumps is not None else None
        kept[kind] = _Kept(
            status,
            condition.reason,
            condition.message,
            row.since if same_status else since,
            row.streak + 1 if same_status else 1,
            bumps,
        )
    _write_conditions(session, node, loaded, kept, now)
    return changed


def _write_conditions(
    session: Session,
    node: str,
    loaded: Mapping[str, _Kept],
    kept: Mapping[str, _Kept],
    now: float,
) -> None:
    """Write what ``store_conditions`` made of the report: new rows inserted, rows only
    counted one UPDATE per count (one in all, but for a report naming a check twice), any other
    row written whole."""
    counted: dict[int, list[str]] = {}
    for kind, row in kept.items():
        if row.bumps == 0:
            continue  # not in the report
        if row.bumps is not None:
            counted.setdefault(row.bumps, []).append(kind)
            continue
        values = {
            "status": row.status,
            "reason": row.reason,
            "message": row.message,
            "last_transition_time": row.since,
            "updated_at": now,
            "streak": row.streak,
        }
        if kind not in loaded:
            session.add(NodeCondition(node=node, type=kind, **values))
            continue
        c = CONDITIONS.c
        session.execute(update(CONDITIONS).where(c.node == node, c.type == kind).values(**values))
        _expire_loaded(session, NodeCondition, [(node, kind)])
    for bumps, kinds in counted.items():
        values = {"node_name": node, "kinds": kinds, "bumps": bumps, "updated": now}
        session.execute(_COUNT_STREAKS, values)
        _expire_loaded(session, NodeCondition, [(node, kind) for kind in kinds])


def _expire_loaded(session: Session, model: type[Base], keys: Iterable[Any]) -> None:
    """Expire the rows of ``model`` the session holds under these primary keys: a statement
    wrote them behind the ORM's back (cheaper than its bulk UPDATE, which builds much more)."""
    if not session.identity_map:
        return
    for key in keys:
        loaded = session.identity_map.get(session.identity_key(model, key))
        if loaded is not None:
            session.expire(loaded)


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
    """Which job holds each GPU of the node (active replicas' devices), in one query of
    columns."""
    return allocations_of(session, [node]).get(node, [])


def allocations_of(session: Session, nodes: Sequence[str]) -> dict[str, list[GpuAllocation]]:
    """``allocations`` of several nodes in one query (a node holding nothing is absent)."""
    rows = session.execute(_ALLOCATIONS, {"nodes": list(nodes)})
    held: dict[str, list[GpuAllocation]] = {}
    for node, gpu_ids, job, tenant, queue in rows.all():
        mine = held.setdefault(node, [])
        mine.extend(
            GpuAllocation(gpu=int(gpu), job=job, tenant=tenant, queue=queue)
            for gpu in gpu_ids or ()
        )
    return held


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
