"""The FastAPI application: routers under ``/api/v1``, ``/healthz``, JSON errors."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI

from kiban import __version__
from kiban.api.errors import install_error_handlers
from kiban.api.routers import cluster, jobs, policy, services
from kiban.platform import Platform

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def create_app(platform: Platform, lifespan: Lifespan | None = None) -> FastAPI:
    """The app over ``platform``; ``lifespan`` starts and stops what the server runs beside it."""
    app = FastAPI(
        lifespan=lifespan,
        title="kiban",
        version=__version__,
        description="A multi-tenant GPU platform for training and serving models.",
    )
    app.state.platform = platform
    install_error_handlers(app)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(jobs.router)
    app.include_router(cluster.router)
    app.include_router(policy.router)
    app.include_router(services.router)
    return app
