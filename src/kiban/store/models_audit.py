"""Tables of the audit log: its append-only chain of records and the chain's head."""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from kiban.store.models import Base


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
