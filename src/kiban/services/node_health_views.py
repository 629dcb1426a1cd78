"""The read side of node health: a node's conditions, their history, the remediation actions
taken on it, its latest readings and its agent, as the API and the CLI show them.

Nodes are cluster-wide and every signed-in caller may read them (as ``GET /nodes``); readings
and conditions carry no tenant data. A remediation action's ``detail`` may name the jobs it
requeued: a member sees the ids of its own tenant's jobs there, and another tenant's job ids
replaced by ``OTHER_TENANTS_JOB`` (an admin sees it as written).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.health.conditions import ConditionStatus
from kiban.health.readings import NodeReading
from kiban.services.auth import Principal
from kiban.services.node_health import stored_reading
from kiban.services.nodes import get_node
from kiban.store.models import Job
from kiban.store.models_nodes import (
    Node,
    NodeCondition,
    NodeConditionChange,
    NodeReadingRow,
    RemediationAction,
)

AGENT_TIMEOUT_S = 90.0
"""Seconds after its last report when a node's agent counts as stale. The remediation policy
carries its own setting (remedy's branch); until the two meet, this is its default."""

HISTORY_LIMIT = 100
"""Condition changes shown, newest first."""

ACTIONS_LIMIT = 100
"""Remediation actions shown, newest first."""

OTHER_TENANTS_JOB = "(another tenant's job)"
"""What a member sees in an action's detail where it names a job of another tenant."""

# Words joined by dashes: a job id (``kiban.services.jobs.new_job_id``: a name, "-", 6 letters
# or digits) is one, or a run of the words of one (``node-1-train-x7k2p9``).
_DASHED_WORDS = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_ID_SUFFIX = 6
_MAX_JOB_ID = 80


@dataclass(frozen=True)
class AgentState:
    """Where a node's agent serves, when it last reported, and whether that is too long ago
    (``stale``: it reported once and then nothing for longer than the timeout)."""

    address: str
    reported_at: float | None
    stale: bool


@dataclass(frozen=True)
class ActionView:
    """A remediation action as the caller may see it (``detail`` redacted for members)."""

    action: str
    check: str
    rule: str
    reading: str
    outcome: str
    detail: str
    at: float


@dataclass(frozen=True)
class NodeHealth:
    """Everything kiban knows of one node's health."""

    node: str
    conditions: list[NodeCondition]
    history: list[NodeConditionChange]
    actions: list[ActionView]
    reading: NodeReading | None
    agent: AgentState


def agent_state(node: Node, now: float, timeout_s: float = AGENT_TIMEOUT_S) -> AgentState:
    """The node's agent as of ``now``; a node no agent ever reported for is not stale."""
    reported = node.agent_reported_at
    stale = reported is not None and now - reported > timeout_s
    return AgentState(address=node.agent_address or "", reported_at=reported, stale=stale)


def node_health(
    session: Session,
    principal: Principal,
    name: str,
    now: float,
    timeout_s: float = AGENT_TIMEOUT_S,
) -> NodeHealth:
    """The node's conditions (by type), latest changes and actions (newest first, at most
    ``HISTORY_LIMIT`` and ``ACTIONS_LIMIT``), its latest reading and its agent; NotFound for
    an unknown node."""
    node = get_node(session, name)
    conditions = list(
        session.scalars(
            select(NodeCondition)
            .where(NodeCondition.node == node.name)
            .order_by(NodeCondition.type)
        )
    )
    history = list(
        session.scalars(
            select(NodeConditionChange)
            .where(NodeConditionChange.node == node.name)
            .order_by(NodeConditionChange.id.desc())
            .limit(HISTORY_LIMIT)
        )
    )
    actions = list(
        session.scalars(
            select(RemediationAction)
            .where(RemediationAction.node == node.name)
            .order_by(RemediationAction.id.desc())
            .limit(ACTIONS_LIMIT)
        )
    )
    row = session.get(NodeReadingRow, node.name)
    reading = None if row is None else stored_reading(row)
    return NodeHealth(
        node=node.name,
        conditions=conditions,
        history=history,
        actions=visible_actions(session, principal, actions),
        reading=reading,
        agent=agent_state(node, now, timeout_s),
    )


def visible_actions(
    session: Session, principal: Principal, actions: Sequence[RemediationAction]
) -> list[ActionView]:
    """The actions as ``principal`` may see them: for a member, every id of another tenant's
    job in a detail is replaced by ``OTHER_TENANTS_JOB``."""
    hidden: set[str] = set()
    if not principal.is_admin:
        hidden = hidden_job_ids(session, principal, (a.detail or "" for a in actions))
    return [
        ActionView(
            action=a.action,
            check=a.check,
            rule=a.rule,
            reading=a.reading,
            outcome=a.outcome,
            detail=redacted(a.detail or "", hidden),
            at=a.at,
        )
        for a in actions
    ]


def hidden_job_ids(session: Session, principal: Principal, texts: Iterable[str]) -> set[str]:
    """The ids of jobs in ``texts`` that ``principal`` may not see."""
    candidates = {c for text in texts for c in job_id_candidates(text)}
    if not candidates:
        return set()
    rows = session.execute(select(Job.id, Job.tenant).where(Job.id.in_(candidates)))
    return {job_id for job_id, tenant in rows.all() if not principal.can_see(tenant)}


def job_id_candidates(text: str) -> set[str]:
    """Every run of dashed words in ``text`` that could be a job id: two words or more, the
    last of six letters or digits."""
    found: set[str] = set()
    for match in _DASHED_WORDS.finditer(text):
        words = match.group(0).split("-")
        for last in range(1, len(words)):
            if len(words[last]) != _ID_SUFFIX:
                continue
            for first in range(last):
                candidate = "-".join(words[first : last + 1])
                if len(candidate) <= _MAX_JOB_ID:
                    found.add(candidate)
    return found


def redacted(text: str, hidden: set[str]) -> str:
    """``text`` with each job id of ``hidden`` (not as part of a longer word) replaced by
    ``OTHER_TENANTS_JOB``."""
    for job_id in sorted(hidden, key=len, reverse=True):
        text = re.sub(rf"(?<![a-z0-9]){re.escape(job_id)}(?![a-z0-9])", OTHER_TENANTS_JOB, text)
    return text


def notable_conditions(session: Session) -> dict[str, list[NodeCondition]]:
    """Per node, its conditions whose status is not False (a problem, or cannot tell), by
    type: what ``GET /nodes`` lists."""
    query = (
        select(NodeCondition)
        .where(NodeCondition.status != ConditionStatus.FALSE.value)
        .order_by(NodeCondition.node, NodeCondition.type)
    )
    found: dict[str, list[NodeCondition]] = {}
    for condition in session.scalars(query):
        found.setdefault(condition.node, []).append(condition)
    return found


def notable_conditions_of(session: Session, name: str) -> list[NodeCondition]:
    """One node's conditions whose status is not False, by type."""
    query = (
        select(NodeCondition)
        .where(NodeCondition.node == name, NodeCondition.status != ConditionStatus.FALSE.value)
        .order_by(NodeCondition.type)
    )
    return list(session.scalars(query))
