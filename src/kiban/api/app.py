"""The FastAPI application: routers under ``/api/v1``, ``/healthz``, JSON errors, admission; the
web dashboard's sign-in, pages and assets (``kiban.web``) on the same port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from anyio import to_thread
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import ASGIApp, Scope

from kiban import __version__
from kiban.api import responses
from kiban.api.admission import Admission
from kiban.api.audit_trail import AuditTrail
from kiban.api.direct_submit import DirectSubmit
from kiban.api.errors import install_error_handlers
from kiban.api.limits import AdmissionLimits
from kiban.api.routers import (
    arrays,
    audit,
    budgets,
    cluster,
    dashboard,
    health_sweeps,
    jobs,
    metrics,
    node_health,
    node_health_views,
    notebooks,
    playground,
    policy,
    services,
    share,
    tenancy,
    usage,
)
from kiban.platform import Platform
from kiban.store.db import REQUEST_THREADS
from kiban.web import notebook_proxy, pages, session

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]
HEALTHY = {"status": "ok"}


def create_app(
    platform: Platform,
    lifespan: Lifespan | None = None,
    limits: AdmissionLimits | None = None,
    web_assets: Path = pages.ASSETS,
) -> KibanApi:
    """The app over ``platform``; ``lifespan`` starts and stops what the server runs beside it;
    ``limits``: how much it takes at once (see ``kiban.api.admission``); ``web_assets``: the
    dashboard's built bundle."""

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        # the threads endpoints run on: the API's pool has a connection for each (store.db)
        to_thread.current_default_thread_limiter().total_tokens = REQUEST_THREADS
        if lifespan is None:
            yield
            return
        async with lifespan(app):
            yield

    app = KibanApi(
        lifespan=run,
        title="kiban",
        version=__version__,
        description="A multi-tenant GPU platform for training and serving models.",
    )
    app.state.platform = platform
    app.state.stopping = asyncio.Event()  # set when the server stops: log follows end
    install_error_handlers(app)

    @app.get("/healthz", tags=["health"], responses=responses.SERVED)
    async def healthz() -> dict[str, str]:
        """Whether the API answers: at once, whatever the load (admission answers it before
        anything else of the app runs; no worker thread, no store)."""
        return HEALTHY

    @app.head("/healthz", tags=["health"], responses=responses.SERVED)
    async def healthz_head() -> None:
        """``/healthz`` without its body (admission answers it too)."""

    app.include_router(jobs.router)
    app.include_router(arrays.router)
    app.include_router(cluster.router)
    app.include_router(share.router)
    app.include_router(node_health_views.router)
    app.include_router(policy.router)
    app.include_router(budgets.router)
    app.include_router(services.router)
    app.include_router(metrics.router)
    app.include_router(node_health.router)
    app.include_router(health_sweeps.router)
    app.include_router(dashboard.router)
    app.include_router(playground.router)
    app.include_router(notebooks.router)
    app.include_router(audit.router)
    app.include_router(tenancy.router)
    app.include_router(usage.router)
    app.router.routes.extend(notebook_proxy.routes)  # /nb/<tenant>/<name>/: notebooks
    session.install_session(app)
    pages.install_pages(app, web_assets)
    app.state.limits = limits or AdmissionLimits()
    return app


class KibanApi(FastAPI):
    """FastAPI with admission in front of all the rest of it, its error middleware included:
    a request refused, or a health check, costs the event loop as little as it can. The audit
    trail is in front of admission: a request refused there is recorded too. A submission,
    once admitted, is answered by its endpoint without FastAPI's routing (``DirectSubmit``)."""

    direct_submit = True
    """False: a submission is routed by FastAPI too (the tests compare the two answers)."""

    def build_middleware_stack(self) -> ASGIApp:
        inner = super().build_middleware_stack()
        if self.direct_submit:
            inner = DirectSubmit(inner, self, _submit_route())
        admission = Admission(
            inner,
            self.state.platform,
            self.state.limits,
            names_operation=self.names_operation,
        )
        return AuditTrail(admission, self.state.platform)

    def names_operation(self, scope: Scope) -> bool:
        """Whether the request's method and path are one of the routes' (a refused caller's
        request that names none is routed, as any caller's: 404, 405, 307)."""
        return any(route.matches(scope)[0] is Match.FULL for route in self.router.routes)


def _submit_route() -> APIRoute:
    """``POST /api/v1/jobs``, as the jobs router declares it."""
    return next(
        route
        for route in jobs.router.routes
        if isinstance(route, APIRoute) and route.endpoint is jobs.submit_job
    )
