"""Fair share per member within a tenant: what ``kiban share`` shows (like Slurm's sshare)."""

from __future__ import annotations

from fastapi import APIRouter

from kiban.api import responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN, NameFilter
from kiban.api.share_schemas import MemberShareOut, member_share_out
from kiban.services import member_usage

router = APIRouter(prefix="/api/v1", tags=["cluster"], dependencies=TOKEN, route_class=SessionRoute)


@router.get("/share", response_model=list[MemberShareOut], responses=responses.READ)
def list_member_shares(
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
    tenant: NameFilter = None,
) -> list[MemberShareOut]:
    """Each member of the caller's tenants (admins: every tenant; ``tenant``: only that one)
    with its weight, raw and decayed usage, effective usage and standing within its tenant."""
    rows = member_usage.visible_shares(
        session, principal, platform.policy, platform.clock.now(), tenant or None
    )
    return [member_share_out(row) for row in rows]
