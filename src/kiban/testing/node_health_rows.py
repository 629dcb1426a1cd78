"""Writing a node's health straight into a platform's store (conditions, their changes,
remediation actions, the latest reading, the agent's report), for tests of what reads them.
Kept apart from ``kiban.testing`` so that importing the builders does not import the store."""

from __future__ import annotations

from dataclasses import dataclass

from kiban.health.conditions import CheckType, ConditionStatus
from kiban.health.readings import NodeReading
from kiban.platform import Platform
from kiban.store.models_nodes import (
    Node,
    NodeCondition,
    NodeConditionChange,
    NodeReadingRow,
    RemediationAction,
)


@dataclass
class NodeHealthRows:
    """``NodeHealthRows(platform, "node-0").condition(CheckType.GPU_ECC, ConditionStatus.TRUE,
    at=...)``: each call writes and commits at once."""

    platform: Platform
    node: str

    def condition(
        self,
        check: CheckType,
        status: ConditionStatus,
        *,
        at: float,
        reason: str = "",
        message: str = "",
        streak: int = 1,
        updated_at: float | None = None,
    ) -> NodeHealthRows:
        """The check's current condition (replacing any), and a change of its history."""
        reason = reason or ("NoProblem" if status is ConditionStatus.FALSE else str(check))
        with self.platform.sessions() as session:
            session.merge(
                NodeCondition(
                    node=self.node,
                    type=check.value,
                    status=status.value,
                    reason=reason,
                    message=message,
                    last_transition_time=at,
                    updated_at=at if updated_at is None else updated_at,
                    streak=streak,
                )
            )
            session.add(
                NodeConditionChange(
                    node=self.node,
                    type=check.value,
                    status=status.value,
                    reason=reason,
                    message=message,
                    at=at,
                )
            )
            session.commit()
        return self

    def action(
        self,
        action: str,
        check: CheckType,
        *,
        at: float,
        rule: str = "rules[0]",
        reading: str = "",
        outcome: str = "done",
        detail: str = "",
    ) -> NodeHealthRows:
        with self.platform.sessions() as session:
            session.add(
                RemediationAction(
                    node=self.node,
                    action=action,
                    check=check.value,
                    rule=rule,
                    reading=reading,
                    outcome=outcome,
                    detail=detail,
                    at=at,
                )
            )
            session.commit()
        return self

    def reading(self, reading: NodeReading) -> NodeHealthRows:
        """The node's latest reading (replacing any)."""
        with self.platform.sessions() as session:
            session.merge(
                NodeReadingRow(
                    node=self.node,
                    taken_at=reading.taken_at,
                    reading=reading.model_dump(mode="json"),
                )
            )
            session.commit()
        return self

    def agent(self, address: str, reported_at: float) -> NodeHealthRows:
        """The node's agent reported from ``address`` at ``reported_at``."""
        return self.node_fields(agent_address=address, agent_reported_at=reported_at)

    def cordoned_by(self, source: str) -> NodeHealthRows:
        """The node cordoned by ``source`` (``admin`` or ``remediation``)."""
        return self.node_fields(cordoned=True, cordon_source=source)

    def node_fields(self, **values: object) -> NodeHealthRows:
        with self.platform.sessions() as session:
            node = session.get(Node, self.node)
            assert node is not None, f"no node {self.node} in the store"
            for key, value in values.items():
                setattr(node, key, value)
            session.commit()
        return self
