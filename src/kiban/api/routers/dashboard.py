"""The dashboard's reads: the cluster at a glance, and the tenants' usage over time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from kiban.api import responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN
from kiban.api.web_schemas import OverviewOut, UsageHistoryOut, overview_out, usage_history_out
from kiban.services import overview, usage_history

router = APIRouter(
    prefix="/api/v1", tags=["dashboard"], dependencies=TOKEN, route_class=SessionRoute
)


@router.get("/overview", response_model=OverviewOut, responses=responses.READ)
def get_overview(
    platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> OverviewOut:
    """GPUs per flavor (total, free, used, borrowed, unhealthy: cluster facts), the caller's
    queues' quota and use per flavor, its waiting jobs per reason, and its tenants' standing."""
    seen = overview.overview(session, principal, platform.policy, platform.clock.now())
    return overview_out(seen)


@router.get("/usage/history", response_model=UsageHistoryOut, responses=responses.READ)
def get_usage_history(
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
    hours: Annotated[
        float,
        Query(gt=0, le=usage_history.MAX_HOURS, description="how far back, in hours"),
    ] = 24.0,
    step: Annotated[
        int,
        Query(
            ge=usage_history.MIN_STEP_S,
            le=usage_history.MAX_HOURS * 3600,
            description=f"seconds per point (at most {usage_history.MAX_POINTS} points in all)",
        ),
    ] = 3600,
) -> UsageHistoryOut:
    """Each visible tenant's GPU-hours per step, and its decayed GPU usage at each step's end
    under the policy's fair-share half-life (a member: its own tenant). Steps end at now."""
    taken, histories = usage_history.usage_history(
        session,
        principal,
        now=platform.clock.now(),
        hours=hours,
        step_s=step,
        half_life_s=platform.policy.half_life_s,
    )
    return usage_history_out(taken, histories)
