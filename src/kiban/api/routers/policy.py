"""The cluster policy: read it (anyone signed in), replace it and list its versions (admins)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query

from kiban.api import request_bodies, responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN
from kiban.api.schemas import (
    PolicyChangeOut,
    PolicyOut,
    PolicyVersionOut,
    policy_change_out,
    policy_out,
    policy_version_out,
)
from kiban.services import policy

router = APIRouter(
    prefix="/api/v1/policy", tags=["policy"], dependencies=TOKEN, route_class=SessionRoute
)


@router.get("", response_model=PolicyOut, responses=responses.READ)
def get_policy(principal: PrincipalDep, session: SessionDep) -> PolicyOut:
    """The policy in force and its version (0: the built-in default); a member sees only its
    tenant's queues and their cohorts."""
    return policy_out(
        policy.current_record(session), tenant=principal.tenant, admin=principal.is_admin
    )


@router.put(
    "",
    response_model=PolicyChangeOut,
    responses=responses.ADMIN_CHANGE_JSON,
    openapi_extra=request_bodies.POLICY,
)
def put_policy(
    document: Annotated[dict[str, Any], Body(description="the policy document")],
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
) -> PolicyChangeOut:
    """Replace the policy: 422 naming each bad field, 409 when the store's state refuses it."""
    change = policy.change_policy(session, principal, document, platform.clock.now())
    session.commit()
    if change.changed:
        platform.policy_changed()
    return policy_change_out(change)


@router.get("/versions", response_model=list[PolicyVersionOut], responses=responses.ADMIN)
def list_versions(
    principal: PrincipalDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[PolicyVersionOut]:
    """Applied versions, newest first."""
    return [policy_version_out(v) for v in policy.list_versions(session, principal, limit)]
