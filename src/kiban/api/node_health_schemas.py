"""What ``GET /api/v1/nodes/{name}/health`` returns (camelCase JSON; the reading as the agent
sent it)."""

from __future__ import annotations

from kiban.api.schemas import ApiModel
from kiban.health.conditions import CheckType, ConditionStatus
from kiban.health.readings import NodeReading
from kiban.services.node_health_views import ActionView, AgentState, NodeHealth
from kiban.store.models_nodes import NodeCondition, NodeConditionChange


class NodeConditionOut(ApiModel):
    """A check's current condition on the node (a Kubernetes NodeCondition's fields), with
    ``streak``: how many reports in a row gave this status, and ``updatedAt``: the latest."""

    type: CheckType
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: float
    streak: int
    updated_at: float


class ConditionChangeOut(ApiModel):
    """A condition's status or reason changed to this at ``at``."""

    type: CheckType
    status: ConditionStatus
    reason: str
    message: str
    at: float


class RemediationActionOut(ApiModel):
    """An action the health rules took on the node: ``action`` (none, cordon, drain, taint,
    hook, uncordon) because of ``check`` under ``rule``, on ``reading`` (the condition's
    message); ``outcome`` pending (decided, not carried out yet), done, failed or suppressed
    (the circuit breaker was open); ``detail``
    what it did (a member sees another tenant's job ids there as "(another tenant's job)")."""

    action: str
    check: str
    rule: str
    reading: str
    outcome: str
    detail: str
    at: float


class AgentOut(ApiModel):
    """The node's agent: where it serves ``/metrics`` and ``/check`` ("" when none said),
    its last report (None: never), and ``stale``: it has not reported within the agent
    timeout (90 s by default)."""

    address: str
    reported_at: float | None
    stale: bool


class NodeHealthOut(ApiModel):
    """A node's health: its conditions by type, their changes and the actions taken (newest
    first, at most 100 each), its agent's latest reading (None before the first), its agent."""

    node: str
    conditions: list[NodeConditionOut]
    history: list[ConditionChangeOut]
    actions: list[RemediationActionOut]
    reading: NodeReading | None
    agent: AgentOut


def node_condition_out(c: NodeCondition) -> NodeConditionOut:
    return NodeConditionOut(
        type=CheckType(c.type),
        status=ConditionStatus(c.status),
        reason=c.reason,
        message=c.message,
        last_transition_time=c.last_transition_time,
        streak=c.streak,
        updated_at=c.updated_at,
    )


def condition_change_out(c: NodeConditionChange) -> ConditionChangeOut:
    return ConditionChangeOut(
        type=CheckType(c.type),
        status=ConditionStatus(c.status),
        reason=c.reason,
        message=c.message,
        at=c.at,
    )


def action_out(a: ActionView) -> RemediationActionOut:
    return RemediationActionOut(
        action=a.action,
        check=a.check,
        rule=a.rule,
        reading=a.reading,
        outcome=a.outcome,
        detail=a.detail,
        at=a.at,
    )


def agent_out(a: AgentState) -> AgentOut:
    return AgentOut(address=a.address, reported_at=a.reported_at, stale=a.stale)


def node_health_out(health: NodeHealth) -> NodeHealthOut:
    return NodeHealthOut(
        node=health.node,
        conditions=[node_condition_out(c) for c in health.conditions],
        history=[condition_change_out(c) for c in health.history],
        actions=[action_out(a) for a in health.actions],
        reading=health.reading,
        agent=agent_out(health.agent),
    )
