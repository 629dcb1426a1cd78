"""The model server's FastAPI application: routes, error bodies, metrics, background load.

``create_app`` starts loading the model when the app starts (unless given an
already loaded one), so liveness answers at once and readiness follows the load.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kiban.serving.runtime import routes_openai, routes_v2
from kiban.serving.runtime.errors import BadRequest, InternalError, ServingError
from kiban.serving.runtime.loading import LoadedModel
from kiban.serving.runtime.metrics import CONTENT_TYPE, ServerMetrics
from kiban.serving.runtime.options import ServerOptions
from kiban.serving.runtime.service import ModelService

log = logging.getLogger(__name__)


class _MetricsMiddleware:
    """Counts requests in flight and times each until its last byte, labelled by route."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A scrape is not counted: it would always read itself as a request in flight.
        if scope["type"] != "http" or scope["path"] == "/metrics":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, record_status)
        finally:
            self.metrics.in_flight.dec()
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.request_seconds.labels(route=route).observe(time.perf_counter() - started)
            self.metrics.requests.labels(route=route, status=str(status)).inc()


def _error(exc: ServingError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def create_app(
    options: ServerOptions,
    *,
    loaded: LoadedModel | None = None,
    on_load_failure: Callable[[str], None] | None = None,
) -> FastAPI:
    """The app for ``options``; with ``loaded`` it serves that model instead of loading one."""
    metrics = ServerMetrics(options.model_name)
    service = ModelService(options, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if loaded is not None:
            service.attach(loaded)
        else:
            service.load_in_background(on_load_failure)
        yield
        await service.close()

    app = FastAPI(title="kiban model server", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service
    app.state.metrics = metrics
    app.include_router(routes_openai.build_router("/openai/v1"))
    app.include_router(routes_openai.build_router("/v1"))
    app.include_router(routes_v2.router)

    @app.get("/metrics")
    async def metrics_route() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.exception_handler(ServingError)
    async def serving_error(request: Request, exc: ServingError) -> JSONResponse:
        return _error(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
        field = ".".join(str(p) for p in first.get("loc", ())) or None
        return _error(BadRequest(f"{field}: {first.get('msg', 'invalid')}", param=field))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = ServingError(str(exc.detail), code=str(exc.status_code))
        error.status = exc.status_code
        error.error_type = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return _error(error)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error on %s", request.url.path, exc_info=exc)
        return _error(InternalError(f"internal error: {type(exc).__name__}"))

    app.add_middleware(_MetricsMiddleware, metrics=metrics)
    return app
