"""Usage accounting (``kiban usage``): GPU- and CPU-hours per tenant, member, queue, flavor or
job, like ``sacct``/``sreport``; a member or viewer reads their tenant's, an admin all."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from kiban.api import responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN
from kiban.api.usage_schemas import UsageReportOut, usage_report_out
from kiban.services import accounting

router = APIRouter(
    prefix="/api/v1/usage", tags=["usage"], dependencies=TOKEN, route_class=SessionRoute
)


@router.get("", response_model=UsageReportOut, responses=responses.READ)
def get_usage(
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
    by: Annotated[
        str,
        Query(
            description="tenant, user, queue, flavor or job",
            json_schema_extra={"enum": [g.value for g in accounting.UsageGroup]},
        ),
    ] = "tenant",
    since: Annotated[
        str, Query(description="a duration back from now (30d, 12h) or a date (2026-11-01)")
    ] = "30d",
    until: Annotated[str | None, Query(description="as since; none: now")] = None,
    granularity: Annotated[
        str | None,
        Query(
            description="day, week or month (UTC); none: the whole window",
            json_schema_extra={"enum": [g.value for g in accounting.Granularity]},
        ),
    ] = None,
) -> UsageReportOut:
    """Usage within the window: 422 naming the field for an unknown grouping or granularity,
    a time that cannot be read, or a window that ends before it starts."""
    now = platform.clock.now()
    report = accounting.usage_report(
        session,
        principal,
        by=accounting.parse_group(by),
        since=accounting.parse_time(since, field="since", now=now),
        until=now if until is None else accounting.parse_time(until, field="until", now=now),
        now=now,
        granularity=accounting.parse_granularity(granularity),
        price=accounting.pricing(session),
    )
    return usage_report_out(report)
