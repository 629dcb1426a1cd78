"""Every error leaves as JSON.

The body is ``{"error": {"status", "message", "problems": [{"field", "message"}]}}``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from kiban.domain.errors import FieldProblem, SpecError, format_location
from kiban.services.errors import ServiceError


def error_body(
    status: int, message: str, problems: list[FieldProblem] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"status": status, "message": message}
    if problems:
        body["problems"] = [{"field": p.field, "message": p.message} for p in problems]
    return {"error": body}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(error_body(exc.status, exc.message), status_code=exc.status)

    @app.exception_handler(SpecError)
    async def _spec(_: Request, exc: SpecError) -> JSONResponse:
        return JSONResponse(error_body(422, f"invalid input: {exc}", exc.problems), status_code=422)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for item in exc.errors():
            loc = tuple(item.get("loc", ()))
            if loc and loc[0] in ("query", "path", "body", "header"):
                loc = loc[1:]
            problems.append(FieldProblem(format_location(loc), str(item.get("msg", "invalid"))))
        message = "invalid input: " + "; ".join(str(p) for p in problems)
        return JSONResponse(error_body(422, message, problems), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            error_body(exc.status_code, str(exc.detail)), status_code=exc.status_code
        )
