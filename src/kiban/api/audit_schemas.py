"""The audit log's API shapes: records as listed, the verdict of a walk of the chain, and the
anchor an admin keeps outside the store."""

from __future__ import annotations

from kiban.api.schemas import ApiModel
from kiban.domain.audit import ChainAnchor, ChainedEntry, Verification


class AuditRecordOut(ApiModel):
    """One audited request: when, who (member, role, tenant, from which address), what
    (action, method, path, target), how it ended (status, outcome), and its place in the chain."""

    seq: int
    at: float
    member: str | None
    role: str | None
    tenant: str | None
    source: str | None
    method: str
    path: str
    action: str
    target: str | None
    status: int | None
    outcome: str
    prev_hash: str
    hash: str


class AuditVerificationOut(ApiModel):
    """The chain walked from its first record: ``intact``, or the first record where it breaks
    (``breakSeq``), why (``reason``: edited, relinked, missing, truncated, head-mismatch; with
    an anchor, anchor-gone or anchor-changed); ``anchor``: the anchor checked, if any."""

    intact: bool
    records: int
    break_seq: int | None
    reason: str | None
    message: str
    anchor: str | None = None


class AuditAnchorOut(ApiModel):
    """The chain's last record, to keep outside the store: its number (``seq``), its hash, and
    both as ``anchor`` (``SEQ:HASH``, what ``verify?anchor=`` and ``kiban audit verify
    --anchor`` take)."""

    seq: int
    hash: str
    anchor: str


def anchor_out(anchor: ChainAnchor) -> AuditAnchorOut:
    return AuditAnchorOut(seq=anchor.seq, hash=anchor.hash, anchor=str(anchor))


def audit_record_out(record: ChainedEntry) -> AuditRecordOut:
    entry = record.entry
    return AuditRecordOut(
        seq=record.seq,
        at=entry.at,
        member=entry.member,
        role=entry.role,
        tenant=entry.tenant,
        source=entry.source,
        method=entry.method,
        path=entry.path,
        action=str(entry.action),
        target=entry.target,
        status=entry.status,
        outcome=str(entry.outcome),
        prev_hash=record.prev_hash,
        hash=record.hash,
    )


def verification_out(
    verdict: Verification, anchor: ChainAnchor | None = None
) -> AuditVerificationOut:
    return AuditVerificationOut(
        anchor=None if anchor is None else str(anchor),
        intact=verdict.intact,
        records=verdict.records,
        break_seq=verdict.break_seq,
        reason=None if verdict.reason is None else str(verdict.reason),
        message=verdict.message or intact_message(verdict, anchor),
    )


def intact_message(verdict: Verification, anchor: ChainAnchor | None) -> str:
    message = f"the chain of {verdict.records} record(s) is intact"
    if anchor is not None:
        message += f" and holds the anchored record {anchor.seq} with its hash"
    return message
