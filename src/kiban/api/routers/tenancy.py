"""Tokens (listing, revoking) and deleting tenants and queues; changing a queue's settings."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from kiban.api import responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import NAME, TOKEN, TenantName
from kiban.api.schemas import QueueOut, queue_out
from kiban.api.token_schemas import (
    DeletionOut,
    QueueChange,
    TokenInfo,
    deletion_out,
    token_info,
)
from kiban.services import queue_admin, queue_status, tenants

router = APIRouter(prefix="/api/v1", tags=["cluster"], dependencies=TOKEN, route_class=SessionRoute)

DELETION: responses.Responses = {
    **responses.ADMIN_CHANGE,
    202: {
        "model": DeletionOut,
        "description": "Draining: its jobs are cancelled, services deleted, notebooks stopped, "
        "and still ending; ask again.",
    },
}

Drain = Annotated[
    bool,
    Query(
        description="cancel its unfinished jobs, delete its services, stop its notebooks, and "
        "delete it once they have ended"
    ),
]
QueueName = Annotated[
    str, Path(description="the queue's name", json_schema_extra={"pattern": NAME})
]


@router.get("/tokens", response_model=list[TokenInfo], responses=responses.ADMIN)
def list_tokens(
    principal: PrincipalDep,
    session: SessionDep,
    tenant: Annotated[str | None, Query(description="only this tenant's")] = None,
    revoked: Annotated[
        bool, Query(alias="all", description="the revoked tokens too (default: active only)")
    ] = False,
) -> list[TokenInfo]:
    """Tokens: id, member, role, created, expires, last use, when and by whom revoked; never
    the secret. A tenant-admin sees their tenant's."""
    rows = tenants.list_tokens(session, principal, tenant or None, revoked)
    return [token_info(row) for row in rows]


@router.delete("/tokens/{token_id}", response_model=TokenInfo, responses=responses.ADMIN_CHANGE)
def revoke_token(
    token_id: int, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> TokenInfo:
    """Revoke a token: its next request is refused (401); it stays listed with ``all``. 409
    when it is the last admin token, or revoked already."""
    row = tenants.revoke_token(session, principal, token_id, platform.clock.now())
    session.commit()
    platform.lookups.clear()  # cached callers: read again, this one no more
    return token_info(row)


@router.delete("/tenants/{tenant}", response_model=DeletionOut, responses=DELETION)
def delete_tenant(
    tenant: TenantName,
    response: Response,
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
    drain: Drain = False,
) -> DeletionOut:
    """Delete a tenant: refused (409) while it has unfinished jobs, services or active
    notebooks; ``drain`` deletes the services, stops the notebooks and cancels the jobs (202
    while they end). Its tokens are revoked, its queues leave the policy; its history stays."""
    deletion = tenants.delete_tenant(session, principal, tenant, platform.clock.now(), drain)
    session.commit()
    platform.lookups.clear()
    if deletion.deleted:
        platform.policy_changed()
    else:
        response.status_code = 202
        platform.loop.wake()
    return deletion_out(deletion)


@router.delete("/queues/{name}", response_model=DeletionOut, responses=DELETION)
def delete_queue(
    name: QueueName,
    response: Response,
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
    drain: Drain = False,
) -> DeletionOut:
    """Remove a queue from the policy: refused (409) while it has unfinished jobs, services or
    active notebooks; ``drain`` ends them as for a tenant (202 while they end)."""
    deletion = tenants.delete_queue(session, principal, name, platform.clock.now(), drain)
    session.commit()
    if deletion.deleted:
        platform.policy_changed()
    else:
        response.status_code = 202
        platform.loop.wake()
    return deletion_out(deletion)


@router.patch("/queues/{name}", response_model=QueueOut, responses=responses.ADMIN_CHANGE_JSON)
def change_queue(
    name: QueueName,
    body: QueueChange,
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
) -> QueueOut:
    """Change a queue's settings (a new policy version). Its tenant's tenant-admins may change
    its strategy, quota and fairShareWeight while the tenant's queues stay within the limits
    admins set (403 naming the field, the ceiling and the total otherwise)."""
    queue = queue_admin.change_queue(session, principal, name, body.changes(), platform.clock.now())
    session.commit()
    platform.policy_changed()
    statuses = queue_status.queue_statuses(
        session, principal, platform.policy, platform.clock.now()
    )
    return queue_out(next(s for s in statuses if s.queue.name == queue.name))
