"""Request dependencies: the platform, a store session, and the authenticated caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from kiban.platform import Platform
from kiban.services.auth import Principal, authenticate


async def get_platform(request: Request) -> Platform:
    """The platform (async: FastAPI would run a plain function on a worker thread)."""
    platform: Platform = request.app.state.platform
    return platform


def get_session(platform: Annotated[Platform, Depends(get_platform)]) -> Iterator[Session]:
    with platform.sessions() as session:
        yield session


def get_principal(
    session: Annotated[Session, Depends(get_session)],
    authorization: Annotated[str | None, Header()] = None,
) -> Principal:
    return authenticate(session, authorization)


PlatformDep = Annotated[Platform, Depends(get_platform)]
SessionDep = Annotated[Session, Depends(get_session)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
