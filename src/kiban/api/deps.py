"""Request dependencies: the platform, a store session, and the authenticated caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from kiban.platform import Platform
from kiban.services.auth import Principal, authenticate
from kiban.services.errors import Forbidden


async def get_platform(request: Request) -> Platform:
    """The platform (async: FastAPI would run a plain function on a worker thread)."""
    platform: Platform = request.app.state.platform
    return platform


def get_session(platform: Annotated[Platform, Depends(get_platform)]) -> Iterator[Session]:
    with platform.sessions() as session:
        yield session


def get_principal(
    request: Request,
    session: Annotated[Session, Depends(get_session)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    return allowed(authenticate(session, authorization), request.method, request.url.path)


def allowed(principal: Principal, method: str, path: str) -> Principal:
    """The principal, unless it is a job's token making a call beyond its own job."""
    if principal.job_id is not None and not principal.job_may(method, path):
        raise Forbidden(
            f"this is job {principal.job_id}'s token: it may only read that job and report "
            "its checkpoints"
        )
    return principal


PlatformDep = Annotated[Platform, Depends(get_platform)]
SessionDep = Annotated[Session, Depends(get_session)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
