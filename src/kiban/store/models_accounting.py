"""Tables of accounting: tenants' and members' decayed usage, the usage records of attempts and
service replicas, and budgets' extensions and the marks they reached."""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from kiban.store.models import Base


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
