"""Tables of the store. Times are UNIX seconds (floats) so both SQLite and PostgreSQL agree."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from kiban.domain.stop_intents import StopIntent


class Base(DeclarativeBase):
    """Base of all tables."""

    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Tenant(Base):
    """A team: owns queues, members' tokens and jobs. A deleted tenant (``deleted_at``) keeps
    its row for its finished jobs' and usage's history; creating it again restores it."""

    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float)
    deleted_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class TenantUsage(Base):
    """A tenant's decayed usage (weighted resource-seconds) as of ``updated_at``."""

    __tablename__ = "tenant_usage"

    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"), primary_key=True)
    usage: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class MemberUsage(Base):
    """A member's decayed usage within its tenant (weighted resource-seconds) as of
    ``updated_at``, fair share's second level, and its undecayed total (``raw_usage``).

    No foreign key to ``tenants``: a member's history is kept while its tenant is
    deleted and made again, as its usage records are."""

    __tablename__ = "member_usage"

    tenant: Mapped[str] = mapped_column(String(63), primary_key=True)
    member: Mapped[str] = mapped_column(String(128), primary_key=True)
    usage: Mapped[float] = mapped_column(Float)
    raw_usage: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class ApiToken(Base):
    """A bearer token, stored as its SHA-256; admin tokens have no tenant, a job's token
    (role "job") names its job and lives while the job does. ``name`` is the member the token
    belongs to; ``last_used_at`` is noted at most once a minute (``kiban.services.auth``). A
    revoked token keeps its row (``revoked_at``, ``revoked_by``: who had access, and whose
    audited actions) and is refused."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    name: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))  # a kiban.domain.roles.Role
    tenant: Mapped[str | None] = mapped_column(ForeignKey("tenants.name"), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_by: Mapped[str | None] = mapped_column(String(128), nullable=True)


def _gpus(per_flavor: dict[str, Any] | None) -> dict[str, int]:
    """``{"h100": {"gpu": 16}}`` as ``{"h100": 16}``."""
    return {flavor: int(amount.get("gpu", 0)) for flavor, amount in (per_flavor or {}).items()}


class Queue(Base):
    """Where a tenant's jobs wait, as the current policy declares it (kiban.services.policy).

    ``quota`` holds the nominal GPUs per flavor, ``{"h100": {"gpu": 16}}`` (None: no quota, any
    flavor); ``borrowing_limit`` and ``lending_limit`` have the same shape (a flavor not listed:
    no limit). Columns are in the order the migrations leave them.
    """

    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"), index=True)
    strategy: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[float] = mapped_column(Float)
    cohort: Mapped[str | None] = mapped_column(String(63), nullable=True)
    quota: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    borrowing_limit: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    lending_limit: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    fair_share_weight: Mapped[float] = mapped_column(Float, default=1.0)

    @property
    def nominal(self) -> dict[str, int] | None:
        """Nominal GPUs per flavor (None: no quota)."""
        return None if self.quota is None else _gpus(self.quota)

    @property
    def extended_nominal(self) -> dict[str, dict[str, int]]:
        """The extended resources its quota limits, per flavor: the quota's other keys than
        ``gpu`` (``{"h100": {"gpu": 64, "nvidia.com/hostdev": 64}}``)."""
        return {
            flavor: {k: int(v) for k, v in amount.items() if k != "gpu"}
            for flavor, amount in (self.quota or {}).items()
            if any(k != "gpu" for k in amount)
        }

    @property
    def borrowing(self) -> dict[str, int]:
        """Borrowing limit in GPUs per flavor (a flavor not listed: no limit)."""
        return _gpus(self.borrowing_limit)

    @property
    def lending(self) -> dict[str, int]:
        """Lending limit in GPUs per flavor (a flavor not listed: all its unused quota)."""
        return _gpus(self.lending_limit)

    @property
    def gpu_quota(self) -> int | None:
        """All nominal GPUs together (None: no quota), for readers that predate flavors."""
        nominal = self.nominal
        return None if nominal is None else sum(nominal.values())


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


class Job(Base):
    """A unit of work and where it is in its life; ``spec`` holds the validated manifest spec."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    name: Mapped[str] = mapped_column(String(63))
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"))
    queue: Mapped[str] = mapped_column(String(63))
    state: Mapped[str] = mapped_column(String(16))
    priority: Mapped[int] = mapped_column(Integer, default=0)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    submitted_at: Mapped[float] = mapped_column(Float)
    admitted_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    master_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Checked by the store too (0013_stop_intents); a value no member has fails to load.
    stop_intent: Mapped[StopIntent | None] = mapped_column(
        Enum(
            StopIntent,
            native_enum=False,
            create_constraint=False,
            length=16,
            values_callable=lambda members: [m.value for m in members],
            validate_strings=True,
        ),
        nullable=True,
    )
    stop_deadline: Mapped[float | None] = mapped_column(Float, nullable=True)
    reason_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    reason_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    reason_details: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    queue_position: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The job that preempted it: while it stops, and afterwards (it may not preempt that one).
    preempted_by: Mapped[str | None] = mapped_column(String(80), nullable=True)
    # Nodes its preemptions free, kept for it while it waits for them (WaitingForPreemption).
    nominated_nodes: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    last_checkpoint_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    eta: Mapped[float | None] = mapped_column(Float, nullable=True)  # forecast start time
    cluster_position: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # GPUs it asks for, all replicas together, set at submission (None only in rows that had
    # ended before migration 0011): a queue's pending GPUs add up without reading specs.
    gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The name of the token that submitted it (``kiban cancel --mine``); None before 0012.
    submitted_by: Mapped[str | None] = mapped_column(String(63), nullable=True)
    # Attempts ended by the job's own failure: what its backoffLimit counts.
    failed_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Replicas it asks for, all tasks together, set at submission (None in rows stored before
    # migration 0014, whose manifest is parsed instead): jobs are listed without parsing specs.
    replicas: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Nodes it must keep off for a while (a node that failed its preflight): a list of
    # ``{"node", "until", "reason"}``; an entry whose ``until`` has passed no longer counts.
    excluded_nodes: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    # The array it is an index of, and which (``kiban.services.job_arrays``); None otherwise.
    array_id: Mapped[str | None] = mapped_column(String(80), nullable=True)
    array_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Why a pending job is kept from the scheduler (a ``JobGate``: a dependency, its array's
    # parallelism); None: it is not (``kiban.control.gates`` lifts it).
    gate: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # Whether its forecast start (``eta``) rests on estimated run times of jobs with no
    # maxRuntime (``kiban.domain.runtime_estimate``); None: not forecast since 0021.
    eta_estimated: Mapped[bool | None] = mapped_column(Boolean, nullable=True)

    __table_args__ = (
        # Jobs of some states, newest first (listings; the loop's running jobs by the prefix).
        Index("ix_jobs_state_submitted", "state", text("submitted_at DESC"), "id"),
        Index("ix_jobs_submitted", text("submitted_at DESC"), "id"),  # every job, newest first
        Index("ix_jobs_tenant_submitted", "tenant", "submitted_at"),
        # Jobs per queue and state, and the GPUs of a queue's pending jobs, from the index alone.
        Index("ix_jobs_queue_state", "queue", "state", "gpus"),
        # Each scheduling pass reads the head of every queue in order (held jobs left out, so
        # that 10,000 array indices waiting for their turn cost a pass nothing).
        Index(
            "ix_jobs_pending_order",
            "queue",
            text("priority DESC"),
            "submitted_at",
            "id",
            sqlite_where=text("state = 'Pending' AND gate IS NULL"),
            postgresql_where=text("state = 'Pending' AND gate IS NULL"),
        ),
        # An array's indices by state (is any still to end?), and its held ones in order.
        Index(
            "ix_jobs_array_state",
            "array_id",
            "state",
            sqlite_where=text("array_id IS NOT NULL"),
            postgresql_where=text("array_id IS NOT NULL"),
        ),
        Index(
            "ix_jobs_array_gate",
            "array_id",
            "gate",
            "array_index",
            sqlite_where=text("array_id IS NOT NULL"),
            postgresql_where=text("array_id IS NOT NULL"),
        ),
        # The pending jobs a pass has judged (its window's, a few hundred per queue of any
        # backlog): what queue status reads for the flavors their reasons name.
        Index(
            "ix_jobs_pending_judged",
            "queue",
            sqlite_where=text("state = 'Pending' AND reason_code IS NOT NULL"),
            postgresql_where=text("state = 'Pending' AND reason_code IS NOT NULL"),
        ),
    )


class JobArray(Base):
    """A job array (``spec.array``): one job per index, ``<id>_<index>``, each a row of
    ``jobs``. ``open``: some index still waits for a slot under ``parallelism``."""

    __tablename__ = "job_arrays"

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    name: Mapped[str] = mapped_column(String(63))
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"))
    queue: Mapped[str] = mapped_column(String(63))
    indices: Mapped[str] = mapped_column(Text)  # as the manifest wrote them
    size: Mapped[int] = mapped_column(Integer)
    parallelism: Mapped[int | None] = mapped_column(Integer, nullable=True)
    submitted_at: Mapped[float] = mapped_column(Float)
    submitted_by: Mapped[str | None] = mapped_column(String(63), nullable=True)
    open: Mapped[bool] = mapped_column(Boolean, default=False)

    __table_args__ = (
        Index("ix_job_arrays_tenant_submitted", "tenant", "submitted_at"),
        Index(
            "ix_job_arrays_open", "open", sqlite_where=text("open"), postgresql_where=text("open")
        ),
    )


class JobDependency(Base):
    """A ``dependsOn`` entry not yet resolved: ``dependent`` (a job, or an array: all its
    indices) waits until ``target`` (a job, or an array: all its indices) ends as
    ``condition`` asks. Deleted once it holds (or can no longer hold, failing the dependent)."""

    __tablename__ = "job_dependencies"

    dependent: Mapped[str] = mapped_column(String(80), primary_key=True)
    target: Mapped[str] = mapped_column(String(80), primary_key=True)
    dependent_is_array: Mapped[bool] = mapped_column(Boolean, default=False)
    target_is_array: Mapped[bool] = mapped_column(Boolean, default=False)
    condition: Mapped[str] = mapped_column(String(16))  # a DependencyCondition
    position: Mapped[int] = mapped_column(Integer, default=0)  # its place in dependsOn


class Replica(Base):
    """One launched replica of a job attempt: where it runs and the process that runs it."""

    __tablename__ = "replicas"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    task: Mapped[str] = mapped_column(String(63))
    index: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(253))
    gpu_ids: Mapped[list[Any]] = mapped_column(JSON)
    cpu_millis: Mapped[int] = mapped_column(Integer)
    memory: Mapped[int] = mapped_column(BigInteger)
    active: Mapped[bool] = mapped_column(Boolean, default=True)  # holds its resources
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The executor's identity of a replica that is not a local process (a pod: ns/name/uid).
    handle: Mapped[str | None] = mapped_column(String(512), nullable=True)
    # What a running replica waits for, as its executor tells (its image being pulled).
    waiting: Mapped[str | None] = mapped_column(Text, nullable=True)

    __table_args__ = (Index("ix_replicas_active", "active"),)


class UsageRecord(Base):
    """What one attempt of a job (``kind`` job: all its replicas) or one service replica
    (``kind`` service) held, undecayed: opened when it starts (``ended_at``, ``outcome`` and
    ``gpu_seconds`` None while it runs), closed once when it is settled
    (``kiban.domain.accounting``). ``member`` is the name of the token that submitted it."""

    __tablename__ = "usage_records"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))  # a UsageKind
    job_id: Mapped[str] = mapped_column(String(80))  # the job's id, or the service's name
    attempt: Mapped[int] = mapped_column(Integer)  # the job's attempt, or the replica's id
    tenant: Mapped[str] = mapped_column(String(63))
    member: Mapped[str | None] = mapped_column(String(128), nullable=True)
    queue: Mapped[str] = mapped_column(String(63))
    flavor: Mapped[str | None] = mapped_column(String(63), nullable=True)
    gpus: Mapped[int] = mapped_column(Integer)
    cpu_millis: Mapped[int] = mapped_column(BigInteger)
    memory: Mapped[int] = mapped_column(BigInteger)  # bytes
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    outcome: Mapped[str | None] = mapped_column(String(16), nullable=True)  # AttemptOutcome
    # When the job's previous record ended (None: its first): a window's jobs are its records
    # whose previous one ended before it (0021a).
    previous_ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (
        Index("ix_usage_records_attempt", "kind", "job_id", "attempt"),
        # A job holds at most one open record (0021a): an attempt is never counted twice.
        Index(
            "ix_usage_records_one_open",
            "job_id",
            unique=True,
            sqlite_where=text("ended_at IS NULL"),
            postgresql_where=text("ended_at IS NULL"),
        ),
        Index("ix_usage_records_tenant_started", "tenant", "started_at"),
        Index("ix_usage_records_started", "started_at"),
        Index("ix_usage_records_open", "ended_at"),
    )


class PolicyVersion(Base):
    """One applied version of the cluster policy: the document as the admin wrote it."""

    __tablename__ = "policy_versions"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    document: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(128))


class Event(Base):
    """Something that happened to an object (a job, a node, the policy), in order."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    object_kind: Mapped[str] = mapped_column(String(16))
    object_name: Mapped[str] = mapped_column(String(253))
    tenant: Mapped[str | None] = mapped_column(String(63), nullable=True)
    type: Mapped[str] = mapped_column(String(8))  # Normal or Warning
    reason: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_events_object", "object_kind", "object_name", "id"),)


class ServiceRow(Base):
    """An inference service: its tenant's name for it, the spec as last submitted, and which
    revisions take its traffic (``stable``, and a ``canary`` with ``canary_percent``)."""

    __tablename__ = "services"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"))
    name: Mapped[str] = mapped_column(String(63))
    document: Mapped[dict[str, Any]] = mapped_column(JSON)  # the manifest as submitted
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # the normalized ServiceSpec
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    revisions_made: Mapped[int] = mapped_column(Integer, default=0)
    stable_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    canary_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    canary_percent: Mapped[int] = mapped_column(Integer, default=0)
    # Set by a delete: the controller stops the replicas, then removes the service.
    deleted_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (Index("ux_services_tenant_name", "tenant", "name", unique=True),)


class ServiceRevision(Base):
    """One revision of a service: the spec that made it (its template) and its state."""

    __tablename__ = "service_revisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    service_id: Mapped[int] = mapped_column(
        ForeignKey("services.id", ondelete="CASCADE"), index=True
    )
    number: Mapped[int] = mapped_column(Integer)
    template_key: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))  # Loading, Ready, Failed, Retired
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    ready_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    desired_replicas: Mapped[int] = mapped_column(Integer, default=0)
    crashes: Mapped[int] = mapped_column(Integer, default=0)  # replicas that died before ready


class ServiceReplica(Base):
    """A replica of a revision: the job that runs it (placed by the scheduler like any job)."""

    __tablename__ = "service_replicas"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    service_id: Mapped[int] = mapped_column(
        ForeignKey("services.id", ondelete="CASCADE"), index=True
    )
    revision_id: Mapped[int] = mapped_column(ForeignKey("service_revisions.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    ready: Mapped[bool] = mapped_column(Boolean, default=False)
    ever_ready: Mapped[bool] = mapped_column(Boolean, default=False)
    ended: Mapped[bool] = mapped_column(Boolean, default=False)  # its job's end was accounted


class NotebookRow(Base):
    """A notebook: its tenant's name for it, its owner, its spec (``NotebookSpec``), the job of
    its current or last run, where it stands, Jupyter's last activity, and why it stopped."""

    __tablename__ = "notebooks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"))
    name: Mapped[str] = mapped_column(String(63))
    owner: Mapped[str] = mapped_column(String(128))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    job_id: Mapped[str | None] = mapped_column(String(80), nullable=True)
    state: Mapped[str] = mapped_column(String(16))  # NotebookState
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float] = mapped_column(Float)  # when its current run was asked for
    ready_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_activity: Mapped[float | None] = mapped_column(Float, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)

    __table_args__ = (Index("ux_notebooks_tenant_name", "tenant", "name", unique=True),)


class NotebookKey(Base):
    """The server-side key Jupyter tokens are derived from (one row; never shown to anyone)."""

    __tablename__ = "notebook_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(128))


class BudgetExtension(Base):
    """An extension of a budget granted by an admin (``kiban budgets extend``): ``amount`` more
    in ``unit`` (a ``BudgetUnit``) for the budget ``budget`` (``tenant`` or ``tenant/queue``)
    from ``granted_at`` until ``until`` (by default the end of the period it was granted in).
    Rows are never changed: they are the record of who granted what, when."""

    __tablename__ = "budget_extensions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    budget: Mapped[str] = mapped_column(String(128), index=True)
    unit: Mapped[str] = mapped_column(String(16))
    amount: Mapped[float] = mapped_column(Float)
    granted_at: Mapped[float] = mapped_column(Float)
    until: Mapped[float] = mapped_column(Float)
    granted_by: Mapped[str] = mapped_column(String(128))
    note: Mapped[str | None] = mapped_column(Text, nullable=True)


class BudgetMark(Base):
    """A warning threshold (``"0.8"``) or the limit (``"exhausted"``) a budget has reached in
    the period that began at ``period_start``: its event is recorded once per period."""

    __tablename__ = "budget_marks"

    budget: Mapped[str] = mapped_column(String(128), primary_key=True)
    period_start: Mapped[float] = mapped_column(Float, primary_key=True)
    mark: Mapped[str] = mapped_column(String(16), primary_key=True)
    at: Mapped[float] = mapped_column(Float)


class AuditRecord(Base):
    """One audited request (``kiban.domain.audit``), chained to the one before it by
    ``prev_hash``; append-only (triggers refuse an UPDATE or a DELETE). ``seq`` is its place in
    the chain, 1, 2, ...; no body of the request or the answer is kept."""

    __tablename__ = "audit_log"

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    at: Mapped[float] = mapped_column(Float)
    member: Mapped[str | None] = mapped_column(String(128), nullable=True)
    role: Mapped[str | None] = mapped_column(String(16), nullable=True)
    tenant: Mapped[str | None] = mapped_column(String(63), nullable=True)
    source: Mapped[str | None] = mapped_column(String(64), nullable=True)
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(String(32))  # an AuditAction
    target: Mapped[str | None] = mapped_column(String(253), nullable=True)
    status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    outcome: Mapped[str] = mapped_column(String(16))  # an AuditOutcome
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))

    __table_args__ = (
        Index("ix_audit_log_at", "at"),
        Index("ix_audit_log_member_at", "member", "at"),
    )


class AuditChainHead(Base):
    """The audit chain's last record (one row, ``id`` 1): appends lock it, so concurrent ones
    make one chain, and it names the end of the log, so removing the last records shows."""

    __tablename__ = "audit_chain_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(BigInteger)
    hash: Mapped[str] = mapped_column(String(64))


class RuntimeObservation(Base):
    """A job that succeeded on its first attempt and how long it ran: what run-time estimates
    are learned from (``kiban.services.runtime_estimates``). Only the newest rows are kept."""

    __tablename__ = "runtime_observations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(80))
    tenant: Mapped[str] = mapped_column(String(63))
    member: Mapped[str | None] = mapped_column(String(128), nullable=True)  # who submitted it
    name: Mapped[str | None] = mapped_column(String(63), nullable=True)
    command: Mapped[str | None] = mapped_column(String(32), nullable=True)  # a digest
    gpus: Mapped[int] = mapped_column(Integer)
    queue: Mapped[str] = mapped_column(String(63))
    runtime_s: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float] = mapped_column(Float)
