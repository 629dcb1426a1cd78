"""Signing in to the dashboard: a kiban token exchanged for the session and CSRF cookies.

``POST /web/session`` checks the token as the API does (``kiban.services.auth``) and answers who
it is, setting ``kiban_session`` (the token; HttpOnly, so no script reads it) and ``kiban_csrf``
(random; the page's script sends it back as ``X-CSRF-Token``, see ``kiban.web.csrf``).
``DELETE /web/session`` clears both. A job's own token does not sign in: it is for its job.
"""

from __future__ import annotations

import secrets

from fastapi import FastAPI, HTTPException, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from starlette.concurrency import run_in_threadpool

from kiban.domain.manifests import problems_from_validation
from kiban.platform import Platform
from kiban.services.auth import MAX_TOKEN_CHARS, Principal, authenticate
from kiban.services.errors import InvalidInput, Unauthorized
from kiban.web.csrf import CSRF_COOKIE, SESSION_COOKIE

SESSION_PATH = "/web/session"
MAX_SIGN_IN_BYTES = 4096
"""A sign-in body is a token in a line of JSON: more is refused (413) before it is all read."""


class SignIn(BaseModel):
    """The token to sign in with (as ``kiban token`` or ``<home>/token`` gives it)."""

    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=MAX_TOKEN_CHARS)


class SignedIn(BaseModel):
    """Who signed in (the shape of ``GET /api/v1/whoami``)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)
    name: str
    tenant: str | None
    is_admin: bool
    role: str  # admin, tenant-admin, member or viewer: what the dashboard offers
    member: str


def _principal(platform: Platform, token: str) -> Principal:
    with platform.sessions() as session:
        principal = authenticate(session, f"Bearer {token.strip()}", platform.clock.now())
        session.commit()  # its last use
        return principal


async def _body(request: Request) -> SignIn:
    """The sign-in body, read up to ``MAX_SIGN_IN_BYTES`` (this path is outside admission's
    bound on bodies): 413 past it, 422 naming the field for a body that is not one."""
    read = b""
    async for chunk in request.stream():
        read += chunk
        if len(read) > MAX_SIGN_IN_BYTES:
            raise HTTPException(413, f"a sign-in body is at most {MAX_SIGN_IN_BYTES} bytes")
    try:
        return SignIn.model_validate_json(read or b"null")
    except ValidationError as exc:
        raise InvalidInput(problems_from_validation(exc)) from None


async def sign_in(request: Request, response: Response) -> SignedIn:
    """Check the token and set the session and CSRF cookies (401 for a token that is not one)."""
    body = await _body(request)
    platform: Platform = request.app.state.platform
    principal = await run_in_threadpool(_principal, platform, body.token)
    if principal.job_id is not None:
        raise Unauthorized("a job's own token cannot sign in to the dashboard")
    secure = request.url.scheme == "https"
    response.set_cookie(
        SESSION_COOKIE,
        body.token.strip(),
        httponly=True,
        samesite="strict",
        path="/",
        secure=secure,
    )
    response.set_cookie(
        CSRF_COOKIE, secrets.token_urlsafe(32), samesite="strict", path="/", secure=secure
    )
    response.headers["Cache-Control"] = "no-store"
    return SignedIn(
        name=principal.name,
        tenant=principal.tenant,
        is_admin=principal.is_admin,
        role=principal.role.value,
        member=principal.member,
    )


async def sign_out() -> Response:
    """Clear both cookies (signing out needs no token: it only forgets one)."""
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    response.delete_cookie(CSRF_COOKIE, path="/", samesite="strict")
    return response


def install_session(app: FastAPI) -> None:
    """Serve ``/web/session`` on ``app`` (on the app itself, not an included router: its plain
    routes are what a 405's ``Allow`` lists)."""
    app.add_api_route(
        SESSION_PATH, sign_in, methods=["POST"], response_model=SignedIn, include_in_schema=False
    )
    app.add_api_route(
        SESSION_PATH, sign_out, methods=["DELETE"], status_code=204, include_in_schema=False
    )
