"""The audit log: list its records, verify its chain, and give its anchor (admins only; reads,
so none of them is audited)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from kiban.api import responses
from kiban.api.audit_schemas import (
    AuditAnchorOut,
    AuditRecordOut,
    AuditVerificationOut,
    anchor_out,
    audit_record_out,
    verification_out,
)
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN
from kiban.domain.audit import AuditAction, parse_anchor
from kiban.domain.errors import SpecError
from kiban.services import audit

ANCHOR_PATTERN = r"^[0-9]{1,18}:[0-9A-Fa-f]{64}$"
"""An anchor as ``kiban audit anchor`` prints it (a record number that fits the store's 64-bit
key, its SHA-256 hash), declared so that generated clients send only those."""

router = APIRouter(
    prefix="/api/v1/audit", tags=["audit"], dependencies=TOKEN, route_class=SessionRoute
)


@router.get("", response_model=list[AuditRecordOut], responses=responses.ADMIN)
def list_records(
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
    since: Annotated[float | None, Query(description="from this time on (UNIX seconds)")] = None,
    member: Annotated[str | None, Query(description="only this member's requests")] = None,
    action: Annotated[AuditAction | None, Query(description="only this action")] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
) -> list[AuditRecordOut]:
    """Audit records, newest first."""
    query = audit.AuditQuery(since=since, member=member, action=action, limit=limit)
    return [
        audit_record_out(r) for r in audit.list_records(session, principal, query, platform.audit)
    ]


@router.get("/verify", response_model=AuditVerificationOut, responses=responses.ADMIN)
def verify(
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
    anchor: Annotated[
        str | None,
        Query(
            description="SEQ:HASH kept from GET /api/v1/audit/anchor: the chain must still "
            "reach that record with that hash",
            pattern=ANCHOR_PATTERN,
        ),
    ] = None,
) -> AuditVerificationOut:
    """Walk the whole chain: intact, or the first record where it breaks and why."""
    kept = None
    if anchor is not None:
        try:
            kept = parse_anchor(anchor)
        except ValueError as exc:
            raise SpecError.single("anchor", str(exc)) from None
    return verification_out(audit.verify_chain(session, principal, platform.audit, kept), kept)


@router.get(
    "/anchor", response_model=AuditAnchorOut, responses={**responses.ADMIN, 409: responses.CONFLICT}
)
def anchor(platform: PlatformDep, principal: PrincipalDep, session: SessionDep) -> AuditAnchorOut:
    """The chain's last record (number and hash), to keep outside the store: a later verify
    with it shows records removed from the end even where the chain head was rewritten."""
    return anchor_out(audit.chain_anchor(session, principal, platform.audit))
