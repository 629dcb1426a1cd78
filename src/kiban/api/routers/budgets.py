"""Budgets: how each stands (a member sees their tenant's, an admin all), and extensions
(admins grant them; everyone sees their tenant's)."""

from __future__ import annotations

from fastapi import APIRouter

from kiban.api import responses
from kiban.api.budget_schemas import (
    BudgetOut,
    ExtensionIn,
    ExtensionOut,
    budget_out,
    extension_out,
)
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN
from kiban.services import budgets, policy

router = APIRouter(
    prefix="/api/v1/budgets", tags=["budgets"], dependencies=TOKEN, route_class=SessionRoute
)


@router.get("", response_model=list[BudgetOut], responses=responses.READ)
def list_budgets(
    platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> list[BudgetOut]:
    """The budgets whose period holds now: used, limit, period, state."""
    current = policy.current_record(session).policy
    now = platform.clock.now()
    return [budget_out(s) for s in budgets.visible_standings(session, principal, current, now)]


@router.get("/extensions", response_model=list[ExtensionOut], responses=responses.READ)
def list_extensions(principal: PrincipalDep, session: SessionDep) -> list[ExtensionOut]:
    """Extensions granted, newest first (the record of who granted what, when)."""
    return [extension_out(r) for r in budgets.list_extensions(session, principal)]


@router.post(
    "/extensions",
    response_model=ExtensionOut,
    status_code=201,
    responses=responses.ADMIN_CHANGE_JSON,
)
def grant_extension(
    body: ExtensionIn, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> ExtensionOut:
    """Grant a budget more GPU-hours (or cost) until a time (admins): held jobs are released
    at the next pass."""
    current = policy.current_record(session).policy
    row = budgets.grant_extension(
        session,
        principal,
        current,
        tenant=body.tenant,
        queue=body.queue,
        gpu_hours=body.gpu_hours,
        cost=body.cost,
        until=body.until_s,
        now=platform.clock.now(),
        note=body.note,
    )
    session.commit()
    platform.loop.wake()
    return extension_out(row)
