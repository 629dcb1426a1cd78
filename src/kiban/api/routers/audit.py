"""The audit log: list its records and verify its chain (admins only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from kiban.api import responses
from kiban.api.audit_schemas import (
    AuditRecordOut,
    AuditVerificationOut,
    audit_record_out,
    verification_out,
)
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN
from kiban.domain.audit import AuditAction
from kiban.services import audit

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
    platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> AuditVerificationOut:
    """Walk the whole chain: intact, or the first record where it breaks and why."""
    return verification_out(audit.verify_chain(session, principal, platform.audit))
