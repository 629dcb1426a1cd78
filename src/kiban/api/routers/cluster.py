"""Queues, nodes, tenants, tokens and the caller's identity."""

from __future__ import annotations

from fastapi import APIRouter, Request

from kiban.api import responses
from kiban.api.audit_trail import name_target
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN, NodeName, TenantName
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
from kiban.services import node_health_views, nodes, queue_admin, queue_status, tenants

router = APIRouter(prefix="/api/v1", tags=["cluster"], dependencies=TOKEN, route_class=SessionRoute)


@router.get("/whoami", response_model=WhoAmI, responses=responses.SIGNED_IN)
def whoami(principal: PrincipalDep) -> WhoAmI:
    return WhoAmI(
        name=principal.name,
        tenant=principal.tenant,
        is_admin=principal.is_admin,
        job_id=principal.job_id,
        role=principal.role.value,
        member=principal.member,
    )


@router.get("/queues", response_model=list[QueueOut], responses=responses.READ)
def list_queues(
    platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> list[QueueOut]:
    """The caller's queues: quota and use per flavor (nominal, used, borrowed, lent, pending)
    and the tenant's fair-share usage and standing."""
    statuses = queue_status.queue_statuses(
        session, principal, platform.policy, platform.clock.now()
    )
    return [queue_out(s) for s in statuses]


@router.post(
    "/queues", status_code=201, response_model=QueueOut, responses=responses.ADMIN_CHANGE_JSON
)
def create_queue(
    body: QueueIn,
    request: Request,
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
) -> QueueOut:
    """Add a queue to the policy (a new policy version): an admin, or a tenant-admin for their
    own tenant, with a quota within the limits admins set (403 naming the field otherwise)."""
    name_target(request.state, body.name)  # a refusal's audit record names the queue too
    queue = queue_admin.create_queue(session, principal, body.entry(), platform.clock.now())
    session.commit()
    platform.policy_changed()
    statuses = queue_status.queue_statuses(
        session, principal, platform.policy, platform.clock.now()
    )
    return queue_out(next(s for s in statuses if s.queue.name == queue.name))


@router.get("/nodes", response_model=list[NodeOut], responses=responses.READ)
def list_nodes(principal: PrincipalDep, session: SessionDep) -> list[NodeOut]:
    """Every node (nodes are cluster-wide): its GPUs and their use, health, cordon and who
    cordoned it, and its health checks' conditions that are not False."""
    used = nodes.gpus_in_use(session)
    notable = node_health_views.notable_conditions(session)
    return [
        node_out(n, used.get(n.name, 0), notable.get(n.name, ())) for n in nodes.list_nodes(session)
    ]


@router.post("/nodes/{name}/cordon", response_model=NodeOut, responses=responses.ADMIN_CHANGE)
def cordon_node(
    name: NodeName, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> NodeOut:
    """Take a node out of scheduling: no new work; running jobs keep running."""
    node = nodes.cordon(session, principal, name, platform.clock.now())
    session.commit()
    notable = node_health_views.notable_conditions_of(session, node.name)
    return node_out(node, nodes.gpus_in_use(session).get(node.name, 0), notable)


@router.post("/nodes/{name}/uncordon", response_model=NodeOut, responses=responses.ADMIN_CHANGE)
def uncordon_node(
    name: NodeName, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> NodeOut:
    """Let a cordoned node take new work again."""
    node = nodes.uncordon(session, principal, name, platform.clock.now())
    session.commit()
    platform.loop.wake()
    notable = node_health_views.notable_conditions_of(session, node.name)
    return node_out(node, nodes.gpus_in_use(session).get(node.name, 0), notable)


@router.get("/tenants", response_model=list[TenantOut], responses=responses.READ)
def list_tenants(principal: PrincipalDep, session: SessionDep) -> list[TenantOut]:
    return [tenant_out(t) for t in tenants.list_tenants(session, principal)]


@router.post(
    "/tenants", status_code=201, response_model=TenantOut, responses=responses.ADMIN_CHANGE_JSON
)
def create_tenant(
    body: TenantIn, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> TenantOut:
    tenant = tenants.create_tenant(session, principal, body.name, platform.clock.now())
    session.commit()
    return tenant_out(tenant)


@router.post(
    "/tenants/{tenant}/tokens",
    status_code=201,
    response_model=TokenOut,
    responses=responses.ADMIN_CHANGE_JSON,
)
def create_token(
    tenant: TenantName,
    body: TokenIn,
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
) -> TokenOut:
    token = tenants.create_member_token(
        session, principal, tenant, body.name, platform.clock.now(), body.role, body.expires
    )
    session.commit()
    row = tenants.token_row(session, token)
    return TokenOut(
        name=body.name,
        tenant=tenant,
        token=token,
        id=row.id,
        role=row.role,
        expires_at=row.expires_at,
    )
