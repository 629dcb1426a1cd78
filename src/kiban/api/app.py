"""The FastAPI application: routers under ``/api/v1``, ``/healthz``, JSON errors."""

from __future__ import annotations

from fastapi import FastAPI

from kiban import __version__
from kiban.api.errors import install_error_handlers
from kiban.api.routers import cluster, jobs
from kiban.platform import Platform


def create_app(platform: Platform) -> FastAPI:
    app = FastAPI(
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
    return app
