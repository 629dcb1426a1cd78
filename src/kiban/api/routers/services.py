"""Inference services: apply, list, describe, promote, roll back, delete, events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from kiban.api import request_bodies, responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN, NameFilter, ServiceName
from kiban.api.routers.jobs import MAX_EVENT_ID
from kiban.api.schemas import EventOut, event_out
from kiban.api.serving_schemas import ServiceOut, TrafficOut, service_out
from kiban.platform import Platform
from kiban.services import events, serving
from kiban.services.job_intake import parse_manifest_body
from kiban.services.service_status import service_status
from kiban.store.models_serving import ServiceRow

router = APIRouter(
    prefix="/api/v1/services", tags=["services"], dependencies=TOKEN, route_class=SessionRoute
)


def _stats(platform: Platform, row: ServiceRow) -> TrafficOut:
    seen = platform.traffic.snapshot(row.tenant, row.name)
    return TrafficOut(
        requests=seen.completed,
        rps=seen.rps,
        in_flight=seen.in_flight,
        queued=seen.queued,
        p50_ms=seen.p50_ms,
        p99_ms=seen.p99_ms,
    )


def _out(platform: Platform, session: Session, row: ServiceRow) -> ServiceOut:
    scaling = {n: d for (sid, n), d in list(platform.services.decisions.items()) if sid == row.id}
    return service_out(
        service_status(session, row),
        platform.service_url(row.tenant, row.name),
        _stats(platform, row),
        scaling,
    )


@router.post(
    "",
    response_model=ServiceOut,
    responses={
        **responses.SUBMIT,
        201: {"model": ServiceOut, "description": "created"},
        200: {"description": "changed"},
    },
    openapi_extra=request_bodies.SERVICE_MANIFEST,
)
async def apply_service(
    request: Request, platform: PlatformDep, principal: PrincipalDep
) -> Response:
    """Create or change a service from a kiban ``Service`` or a KServe ``InferenceService``
    manifest (JSON, or YAML with ``Content-Type: application/yaml``). A changed model, runtime,
    resources or environment makes a new revision (201 for a new service, 200 otherwise)."""
    raw = await request.body()
    content_type = request.headers.get("content-type", "")

    def apply() -> tuple[ServiceOut, bool]:
        document = parse_manifest_body(raw, content_type)
        with platform.sessions() as session:
            applied = serving.apply(
                session, principal, document, facts=platform.facts, at=platform.clock.now()
            )
            session.commit()
            out = _out(platform, session, applied.service)
        out.warnings = list(applied.warnings)
        return out, applied.created

    out, created = await run_in_threadpool(apply)
    platform.services.wake()
    return Response(
        out.model_dump_json(by_alias=True),
        status_code=201 if created else 200,
        media_type="application/json",
    )


@router.get("", response_model=list[ServiceOut], responses=responses.READ)
def list_services(
    platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> list[ServiceOut]:
    return [_out(platform, session, row) for row in serving.list_services(session, principal)]


@router.get("/{name}", response_model=ServiceOut, responses=responses.ONE_SERVICE)
def get_service(
    name: ServiceName,
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
    tenant: NameFilter = None,
) -> ServiceOut:
    """The service; an admin names the ``tenant`` when several tenants have one of that name
    (409 otherwise)."""
    return _out(platform, session, serving.get_visible(session, principal, name, tenant))


def _change(platform: Platform, session: Session, row: ServiceRow) -> ServiceOut:
    session.commit()
    platform.services.wake()
    return _out(platform, session, row)


@router.post("/{name}/promote", response_model=ServiceOut, responses=responses.CHANGE_ONE)
def promote(
    name: ServiceName, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> ServiceOut:
    """Send all traffic to the canary revision (409 unless it is Ready)."""
    row = serving.promote(session, principal, name, platform.clock.now())
    return _change(platform, session, row)


@router.post("/{name}/rollback", response_model=ServiceOut, responses=responses.CHANGE_ONE)
def rollback(
    name: ServiceName, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> ServiceOut:
    """Drop the canary; without one, bring back the revision before the stable one."""
    row = serving.rollback(session, principal, name, platform.clock.now())
    return _change(platform, session, row)


@router.delete("/{name}", response_model=ServiceOut, responses=responses.CHANGE_ONE)
def delete_service(
    name: ServiceName, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> ServiceOut:
    """Stop every replica; the service is removed once they have stopped."""
    row = serving.delete(session, principal, name, platform.clock.now())
    return _change(platform, session, row)


@router.get("/{name}/events", response_model=list[EventOut], responses=responses.ONE_SERVICE)
def service_events(
    name: ServiceName,
    principal: PrincipalDep,
    session: SessionDep,
    after: Annotated[int, Query(ge=0, le=MAX_EVENT_ID)] = 0,
) -> list[EventOut]:
    row = serving.get_visible(session, principal, name)
    found = events.for_object(session, "Service", row.name, after_id=after)
    return [event_out(e) for e in found if e.tenant == row.tenant]
