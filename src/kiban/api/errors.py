"""Every error leaves as JSON.

The body is ``{"error": {"status", "message", "problems": [{"field", "message"}]}}``
(``ErrorBody``); ``problems`` is always there (empty when the error is not about input fields).
A 401 says how to authenticate (``WWW-Authenticate: Bearer``), as RFC 9110 asks.

Methods: a path's routes each take one method, so Starlette's 405 would name only the first
route's; here a 405 lists in ``Allow`` every method of the path, and ``OPTIONS`` answers 204
with that ``Allow`` (RFC 9110, 9.3.7), without a token: the same is in ``/openapi.json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route, compile_path

from kiban.api.schemas import ErrorBody, ErrorOut, ProblemOut
from kiban.domain.errors import FieldProblem, SpecError, format_location
from kiban.services.errors import Forbidden, ServiceError, Unavailable

STORE_BUSY_RETRY_S = 1


def error_body(
    status: int, message: str, problems: list[FieldProblem] | None = None
) -> dict[str, Any]:
    listed = [ProblemOut(field=p.field, message=p.message) for p in problems or []]
    body = ErrorBody(error=ErrorOut(status=status, message=message, problems=listed))
    return body.model_dump(mode="json")


class PathMethods:
    """The methods each path takes, as the OpenAPI document declares them (the included
    routers' routes are not a flat list to search), and the plain routes' (``/docs``)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._paths: list[tuple[re.Pattern[str], set[str]]] | None = None

    def _declared(self) -> list[tuple[re.Pattern[str], set[str]]]:
        if self._paths is None:
            self._paths = [
                (compile_path(path)[0], {method.upper() for method in operations})
                for path, operations in self.app.openapi().get("paths", {}).items()
            ]
        return self._paths

    def allowed(self, request: Request) -> list[str]:
        """Every method some route takes on the request's path, and OPTIONS; sorted."""
        methods = {"OPTIONS"}
        path = request.url.path
        for pattern, declared in self._declared():
            if pattern.match(path):
                methods |= declared
        for route in self.app.router.routes:
            if isinstance(route, Route) and route.methods:
                match, _ = route.matches(request.scope)
                if match is not Match.NONE:
                    methods |= route.methods
        return sorted(methods)


def error_response(
    status: int,
    message: str,
    problems: list[FieldProblem] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    extra = dict(headers or {})
    if status == 401:
        extra.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse(error_body(status, message, problems), status_code=status, headers=extra)


def install_error_handlers(app: FastAPI) -> None:
    path_methods = PathMethods(app)

    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> JSONResponse:
        if isinstance(exc, Unavailable):
            return error_response(
                exc.status, exc.message, headers={"Retry-After": str(exc.retry_after_s)}
            )
        problems = exc.problems if isinstance(exc, Forbidden) else None
        return error_response(exc.status, exc.message, problems)

    @app.exception_handler(sqlalchemy.exc.TimeoutError)
    async def _store_busy(_: Request, exc: sqlalchemy.exc.TimeoutError) -> JSONResponse:
        """No store connection came free in time: the store is overloaded, try again soon."""
        return error_response(
            503,
            "the store is busy: no connection came free in time; try again",
            headers={"Retry-After": str(STORE_BUSY_RETRY_S)},
        )

    @app.exception_handler(SpecError)
    async def _spec(_: Request, exc: SpecError) -> JSONResponse:
        return error_response(422, f"invalid input: {exc}", exc.problems)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for item in exc.errors():
            loc = tuple(item.get("loc", ()))
            if loc and loc[0] in ("query", "path", "body", "header"):
                loc = loc[1:]
            problems.append(FieldProblem(format_location(loc), str(item.get("msg", "invalid"))))
        message = "invalid input: " + "; ".join(str(p) for p in problems)
        return error_response(422, message, problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code != 405:
            return error_response(exc.status_code, str(exc.detail), headers=exc.headers)
        methods = path_methods.allowed(request)
        allow = {"Allow": ", ".join(methods)}
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=allow)
        message = f"{request.method} is not allowed here; allowed: {allow['Allow']}"
        return error_response(405, message, headers=allow)
