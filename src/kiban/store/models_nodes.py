"""Tables of nodes and their health: each node as its executor reports it, its health checks'
conditions and their history, its agent's readings, remediation's actions, allreduce sweeps."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from kiban.store.models import Base


class Node(Base):
    """A machine as reported by the executor, with the admin's cordon and the health verdict."""

    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    gpus: Mapped[int] = mapped_column(Integer)
    cpu_millis: Mapped[int] = mapped_column(Integer)
    memory: Mapped[int] = mapped_column(BigInteger)  # bytes
    labels: Mapped[dict[str, Any]] = mapped_column(JSON)
    healthy: Mapped[bool] = mapped_column(Boolean, default=True)
    health_message: Mapped[str] = mapped_column(Text, default="")
    cordoned: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[float] = mapped_column(Float)
    # As the executor reports them: GPUs held by work kiban did not start, and why the node
    # takes no new work though healthy (its cluster's cordon or taints; "" when it does).
    gpus_used_elsewhere: Mapped[int] = mapped_column(Integer, default=0)
    unschedulable_reason: Mapped[str] = mapped_column(Text, default="")
    # Who cordoned it: "admin" (stays until an admin uncordons) or "remediation" (kiban's
    # health rules; lifted by them after enough healthy checks); "" when not cordoned.
    cordon_source: Mapped[str] = mapped_column(String(16), default="", server_default="")
    # The node agent: where it serves /metrics and /check, and when it last reported.
    agent_address: Mapped[str] = mapped_column(String(255), default="", server_default="")
    agent_reported_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The extended resources it advertises, {name: amount} (hugepages in bytes).
    extended: Mapped[dict[str, int]] = mapped_column(JSON, default=dict, server_default="{}")


class NodeCondition(Base):
    """A health check's current verdict on a node (node-problem-detector's condition shape)."""

    __tablename__ = "node_conditions"

    node: Mapped[str] = mapped_column(String(253), primary_key=True)
    type: Mapped[str] = mapped_column(String(32), primary_key=True)  # a CheckType
    status: Mapped[str] = mapped_column(String(8))  # True, False or Unknown
    reason: Mapped[str] = mapped_column(String(128))
    message: Mapped[str] = mapped_column(Text)
    last_transition_time: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # Consecutive reports with this status: flap damping and return-to-service count them.
    streak: Mapped[int] = mapped_column(Integer, default=1)


class NodeConditionChange(Base):
    """A condition's history: one row each time its status or reason changed."""

    __tablename__ = "node_condition_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(253))
    type: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str] = mapped_column(String(128))
    message: Mapped[str] = mapped_column(Text)
    at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_node_condition_changes_node", "node", "id"),)


class NodeReadingRow(Base):
    """The latest readings a node's agent sent (a ``NodeReading`` as JSON)."""

    __tablename__ = "node_readings"

    node: Mapped[str] = mapped_column(String(253), primary_key=True)
    taken_at: Mapped[float] = mapped_column(Float)
    reading: Mapped[dict[str, Any]] = mapped_column(JSON)


class RemediationAction(Base):
    """An action the health rules took on a node (or would have, had the breaker allowed)."""

    __tablename__ = "remediation_actions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(253))
    action: Mapped[str] = mapped_column(String(16))  # none, cordon, drain, taint, hook, uncordon
    check: Mapped[str] = mapped_column(String(32))  # the CheckType that triggered it
    rule: Mapped[str] = mapped_column(String(128))  # the rule's name or index in the policy
    reading: Mapped[str] = mapped_column(Text)  # the condition's message: what was read
    outcome: Mapped[str] = mapped_column(String(16))  # done, failed, suppressed (breaker open)
    detail: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_remediation_actions_node", "node", "id"),)


class AllreduceResult(Base):
    """One node's or block's bus bandwidth in an allreduce sweep, against its baseline."""

    __tablename__ = "allreduce_results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(80))  # the sweep job that measured it
    scope: Mapped[str] = mapped_column(String(8))  # "node" or "block"
    name: Mapped[str] = mapped_column(String(253))  # the node's or the block's name
    nodes: Mapped[list[str]] = mapped_column(JSON)  # the block's nodes (a node: itself)
    busbw_gbps: Mapped[float] = mapped_column(Float)
    baseline_gbps: Mapped[float] = mapped_column(Float)  # median of its earlier sweeps
    fraction: Mapped[float] = mapped_column(Float)
    degraded: Mapped[bool] = mapped_column(Boolean)
    at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        Index("ix_allreduce_results_name", "scope", "name", "id"),
        Index("ix_allreduce_results_job", "job_id"),
    )
