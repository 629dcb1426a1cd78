"""Every error leaves as JSON.

The body is ``{"error": {"status", "message", "problems": [{"field", "message"}]}}``; ``problems``
is always there (empty when the error is not about input fields). A 401 says how to authenticate
(``WWW-Authenticate: Bearer``), as RFC 9110 asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from kiban.domain.errors import FieldProblem, SpecError, format_location
from kiban.services.errors import ServiceError, Unavailable

STORE_BUSY_RETRY_S = 1


def error_body(
    status: int, message: str, problems: list[FieldProblem] | None = None
) -> dict[str, Any]:
    listed = [{"field": p.field, "message": p.message} for p in problems or []]
    return {"error": {"status": status, "message": message, "problems": listed}}


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
    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> JSONResponse:
        if isinstance(exc, Unavailable):
            return error_response(
                exc.status, exc.message, headers={"Retry-After": str(exc.retry_after_s)}
            )
        return error_response(exc.status, exc.message)

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
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)
