"""Queues, nodes, tenants, tokens and the caller's identity."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select

from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep
from kiban.api.schemas import (
    NodeOut,
    QueueIn,
    QueueOut,
    TenantIn,
    TenantOut,
    TokenIn,
    TokenOut,
    WhoAmI,
    node_out,
    queue_out,
    tenant_out,
)
from kiban.services import tenants
from kiban.services.errors import invalid
from kiban.store.models import Node, Replica

router = APIRouter(prefix="/api/v1", tags=["cluster"])


@router.get("/whoami", response_model=WhoAmI)
def whoami(principal: PrincipalDep) -> WhoAmI:
    return WhoAmI(name=principal.name, tenant=principal.tenant, is_admin=principal.is_admin)


@router.get("/queues", response_model=list[QueueOut])
def list_queues(principal: PrincipalDep, session: SessionDep) -> list[QueueOut]:
    usage = tenants.queue_usage(session)
    return [queue_out(q, usage.get(q.name, {})) for q in tenants.list_queues(session, principal)]


@router.post("/queues", status_code=201, response_model=QueueOut)
def create_queue(
    body: QueueIn, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> QueueOut:
    unknown = sorted(set(body.quota) - {"gpu"})
    if unknown:
        raise invalid(f"quota.{unknown[0]}", "unknown resource; known: gpu")
    queue = tenants.create_queue(
        session,
        principal,
        name=body.name,
        tenant=body.tenant,
        gpu_quota=body.quota.get("gpu"),
        strategy=body.strategy,
        at=platform.clock.now(),
    )
    session.commit()
    platform.loop.wake()
    return queue_out(queue, {})


@router.get("/nodes", response_model=list[NodeOut])
def list_nodes(principal: PrincipalDep, session: SessionDep) -> list[NodeOut]:
    used: dict[str, int] = {}
    for node, gpu_ids in session.execute(
        select(Replica.node, Replica.gpu_ids).where(Replica.active.is_(True))
    ).all():
        used[node] = used.get(node, 0) + len(gpu_ids or [])
    rows = session.scalars(select(Node).order_by(Node.name)).all()
    return [node_out(n, used.get(n.name, 0)) for n in rows]


@router.get("/tenants", response_model=list[TenantOut])
def list_tenants(principal: PrincipalDep, session: SessionDep) -> list[TenantOut]:
    return [tenant_out(t) for t in tenants.list_tenants(session, principal)]


@router.post("/tenants", status_code=201, response_model=TenantOut)
def create_tenant(
    body: TenantIn, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> TenantOut:
    tenant = tenants.create_tenant(session, principal, body.name, platform.clock.now())
    session.commit()
    return tenant_out(tenant)


@router.post("/tenants/{tenant}/tokens", status_code=201, response_model=TokenOut)
def create_token(
    tenant: str, body: TokenIn, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> TokenOut:
    token = tenants.create_member_token(session, principal, tenant, body.name, platform.clock.now())
    session.commit()
    return TokenOut(name=body.name, tenant=tenant, token=token)
