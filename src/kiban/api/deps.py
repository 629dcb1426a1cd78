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
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi import routing as fastapi_routing
from fastapi.dependencies.models import Dependant
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


RequestHandler = Callable[[Request], Coroutine[Any, Any, Response]]


def request_alone(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """Marks an ``async`` endpoint that takes the ``Request`` alone and returns a ``Response``:
    ``SessionRoute`` calls it, and its route's dependencies (each taking the ``Request``
    alone, as the routers' ``TOKEN``), without FastAPI's solving of parameters and
    dependencies for each request (a sixth of a submission's time on the event loop). The
    app's ``dependency_overrides`` do not reach such a route (kiban sets none)."""
    endpoint.request_alone = True  # type: ignore[attr-defined]
    return endpoint


def _async(call: Callable[..., Any] | None) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one (``HTTPBearer``)."""
    return call is not None and (
        inspect.iscoroutinefunction(call)
        or inspect.iscoroutinefunction(getattr(call, "__call__", None))  # noqa: B004
    )


def _of_request_alone(dependant: Dependant) -> bool:
    """Whether the call takes the request (as a ``Request`` or an ``HTTPConnection``) and
    nothing else FastAPI would solve."""
    connection = (dependant.request_param_name, dependant.http_connection_param_name)
    return connection.count(None) == 1 and not (
        dependant.path_params
        or dependant.query_params
        or dependant.header_params
        or dependant.cookie_params
        or dependant.body_params
        or dependant.websocket_param_name
        or dependant.response_param_name
        or dependant.background_tasks_param_name
        or dependant.security_scopes_param_name
    )


def _request_alone_handler(dependant: Dependant) -> RequestHandler:
    """What FastAPI's handler does for such an endpoint: each dependency awaited with the
    request, in order (a refusal raises), then the endpoint, whose ``Response`` is the answer.
    Anything else is a ``TypeError`` when the route is built."""
    checks = dependant.dependencies
    endpoint = dependant.call
    if not (
        _async(endpoint)
        and _of_request_alone(dependant)
        and all(_async(d.call) and _of_request_alone(d) and not d.dependencies for d in checks)
    ):
        raise TypeError(f"{endpoint}: not an async endpoint of the request alone")
    assert endpoint is not None
    calls: list[Callable[[Request], Awaitable[Any]]] = [d.call for d in checks if d.call]

    async def handle(request: Request) -> Response:
        for call in calls:
            await call(request)
        answer = await endpoint(request)
        if not isinstance(answer, Response):
            raise TypeError(f"{endpoint} returned {type(answer).__name__}, not a Response")
        return answer

    return handle


class SessionRoute(APIRoute):
    """A route whose plain (worker thread) endpoint closes its sessions before it returns.

    Every router of the API uses it (a test checks): an endpoint's answer is serialized on
    another worker thread and sent at the client's pace, and a connection held meanwhile is
    one that a thread running another request may be waiting for. An endpoint marked
    ``request_alone`` is called without FastAPI's solving of its parameters.
    """

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        plain = not (
            inspect.iscoroutinefunction(endpoint)
            or inspect.isgeneratorfunction(endpoint)
            or inspect.isasyncgenfunction(endpoint)
        )
        super().__init__(path, closing_sessions(endpoint) if plain else endpoint, **kwargs)

    def get_route_handler(self) -> RequestHandler:
        if not getattr(self.endpoint, "request_alone", False):
            return super().get_route_handler()
        # as FastAPI's: the route as included (its router's dependencies) when it builds that
        context_var = getattr(fastapi_routing, "_effective_route_context_var", None)
        context = None if context_var is None else context_var.get()
        route = context if context is not None and context.original_route is self else self
        return _request_alone_handler(route.dependant)


PlatformDep = Annotated[Platform, Depends(get_platform)]
SessionDep = Annotated[Session, Depends(get_session)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
