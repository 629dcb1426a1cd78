"""Request dependencies: the platform, a store session, and the authenticated caller.

No request holds a store connection while it waits for anything else: the caller is
authenticated before (``kiban.api.admission``, on a session of its own), and an endpoint's
session connects on the endpoint's worker thread and is closed on that thread before the
thread is given back (``SessionRoute``), not once the answer has been serialized (on another
thread) and sent (at the client's pace), as a dependency with ``yield`` would.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session

from kiban.platform import Platform
from kiban.services.auth import Principal
from kiban.services.errors import Forbidden, Unauthorized

PRINCIPAL_STATE = "principal"
"""Where ``Admission`` leaves the authenticated caller in the request's state."""


async def get_platform(request: Request) -> Platform:
    """The platform (async: FastAPI would run a plain function on a worker thread)."""
    platform: Platform = request.app.state.platform
    return platform


async def get_session(platform: Annotated[Platform, Depends(get_platform)]) -> Session:
    """A session of the API's engine, not connected yet: it connects at its first query, on the
    endpoint's worker thread, and ``SessionRoute`` closes it when the endpoint returns."""
    return platform.sessions()


async def get_principal(request: Request) -> Principal:
    """The caller, authenticated by ``Admission`` before the request's body was read."""
    principal: Principal | None = getattr(request.state, PRINCIPAL_STATE, None)
    if principal is None:  # a route outside /api/ asked for a caller: nobody checked one
        raise Unauthorized("missing token: send 'Authorization: Bearer <token>'")
    return principal


def allowed(principal: Principal, method: str, path: str) -> Principal:
    """The principal, unless it is a job's token making a call beyond its own job."""
    if principal.job_id is not None and not principal.job_may(method, path):
        raise Forbidden(
            f"this is job {principal.job_id}'s token: it may only read that job and report "
            "its checkpoints"
        )
    return principal


def closing_sessions(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint`` (run on a worker thread) closing the sessions it was given as it returns,
    on that thread: the connection goes back to the pool before the thread does."""
    if getattr(endpoint, "closes_sessions", False):
        return endpoint

    @functools.wraps(endpoint)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return endpoint(*args, **kwargs)
        finally:
            for value in kwargs.values():
                if isinstance(value, Session):
                    value.close()

    run.closes_sessions = True  # type: ignore[attr-defined]
    return run


class SessionRoute(APIRoute):
    """A route whose plain (worker thread) endpoint closes its sessions before it returns.

    Every router of the API uses it (a test checks): an endpoint's answer is serialized on
    another worker thread and sent at the client's pace, and a connection held meanwhile is
    one that a thread running another request may be waiting for.
    """

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        plain = not (
            inspect.iscoroutinefunction(endpoint)
            or inspect.isgeneratorfunction(endpoint)
            or inspect.isasyncgenfunction(endpoint)
        )
        super().__init__(path, closing_sessions(endpoint) if plain else endpoint, **kwargs)


PlatformDep = Annotated[Platform, Depends(get_platform)]
SessionDep = Annotated[Session, Depends(get_session)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
