"""A node's health: its checks' conditions, their history, the actions taken, its readings."""

from __future__ import annotations

from fastapi import APIRouter

from kiban.api import responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.node_health_schemas import NodeHealthOut, node_health_out
from kiban.api.params import TOKEN, NodeName
from kiban.services import node_health_views

router = APIRouter(prefix="/api/v1", tags=["cluster"], dependencies=TOKEN, route_class=SessionRoute)


@router.get("/nodes/{name}/health", response_model=NodeHealthOut, responses=responses.READ_ONE)
def node_health(
    name: NodeName, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> NodeHealthOut:
    """The node's conditions (one per check), their last 100 changes and the last 100
    remediation actions (newest first), its agent's latest reading and whether the agent is
    stale. Any signed-in caller may read it, as the list of nodes; a member sees another
    tenant's job ids in an action's detail as "(another tenant's job)"."""
    health = node_health_views.node_health(session, principal, name, platform.clock.now())
    return node_health_out(health)
