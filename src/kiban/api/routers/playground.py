"""A service's OpenAI route called through the API: the dashboard's chat playground and
embeddings box (the browser reaches the API only, with its session cookie)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from kiban.api import responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionRoute
from kiban.api.params import TOKEN, NameFilter, ServiceName
from kiban.platform import Platform
from kiban.services import openai_forward, serving
from kiban.services.auth import Principal
from kiban.services.openai_forward import OpenAIPath
from kiban.web.csrf import credentials

router = APIRouter(
    prefix="/api/v1/services", tags=["services"], dependencies=TOKEN, route_class=SessionRoute
)

FORWARDED = {
    **responses.ONE_SERVICE,
    200: {
        "description": "the service's answer as its replicas give it, passed on as it comes: "
        'JSON, or server-sent events for a request with `"stream": true` (the router\'s '
        "own errors, 4xx and 5xx, pass on the same way)",
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/event-stream": {"schema": {"type": "string"}},
        },
    },
    502: responses.error("The serving router could not be reached."),
}
OPENAI_BODY = {
    "requestBody": {
        "required": True,
        "description": "the OpenAI request (`model`, `messages` or `prompt` or `input`, ...)",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}


def _tenant_of(platform: Platform, principal: Principal, name: str, tenant: str | None) -> str:
    with platform.sessions() as session:
        return serving.get_visible(session, principal, name, tenant).tenant


@router.post(
    "/{name}/openai/{path:path}",
    response_class=StreamingResponse,
    responses=FORWARDED,
    openapi_extra=OPENAI_BODY,
)
async def call_openai(
    name: ServiceName,
    path: Annotated[OpenAIPath, Path(description="the OpenAI route")],
    request: Request,
    platform: PlatformDep,
    principal: PrincipalDep,
    tenant: NameFilter = None,
) -> Response:
    """Call the service's OpenAI route (``chat/completions``, ``completions``, ``embeddings``)
    through the serving router, with the caller's credentials; the answer streams back as it
    comes. A member reaches only its tenant's services (another's: 404)."""
    owner = await run_in_threadpool(_tenant_of, platform, principal, name, tenant)
    url = openai_forward.service_openai_url(platform.service_url(owner, name), path)
    authorization = credentials(request.scope["headers"]).authorization
    assert authorization is not None  # admission authenticated the caller with it
    upstream = await openai_forward.forward(
        url, await request.body(), authorization, dict(request.headers)
    )
    return StreamingResponse(
        upstream.body(),
        status_code=upstream.status,
        headers={"Content-Type": upstream.content_type, "Cache-Control": "no-cache"},
    )
