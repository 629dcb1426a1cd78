"""Tables of the store's core: tenants and their tokens, queues, the policy's versions, jobs
(arrays, dependencies, replicas, run times learned), events; and ``Base``, which every table of
the other ``models_*`` modules derives from (``kiban.store.schema`` gathers them all).

Times are UNIX seconds (floats) so both SQLite and PostgreSQL agree."""

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
