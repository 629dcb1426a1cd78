"""The dashboard's pages and built assets, served by the API's own server.

Every page path answers the same ``index.html`` (the single-page app routes with the History
API), never cached, so a new build shows at the next load; ``/assets/`` serves the bundle. The
assets are built by ``scripts/build-web.sh`` (``make setup``) into ``kiban/web/assets`` and
ship in the package; without them a page answers 503 saying how to build them.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, PlainTextResponse, Response

from kiban.services.errors import NotFound

ASSETS = Path(__file__).parent / "assets"
"""Where ``scripts/build-web.sh`` writes the bundle (package data)."""
INDEX = "index.html"
PAGES = (
    "/",
    "/signin",
    "/jobs",
    "/jobs/{job_id}",
    "/submit",
    "/nodes",
    "/services",
    "/services/{name}",
    "/usage",
    "/notebooks",
    "/tokens",
)
"""The dashboard's page paths (the ones its router knows)."""
NOT_BUILT = (
    "the web dashboard is not built: run `make setup` (or scripts/build-web.sh) and start "
    "kiban again\n"
)


def install_pages(app: FastAPI, assets: Path = ASSETS) -> None:
    """Serve the pages and ``/assets/`` from ``assets`` on ``app``."""
    index = assets / INDEX

    async def page() -> Response:
        if not index.is_file():
            return PlainTextResponse(NOT_BUILT, status_code=503)
        return FileResponse(index, media_type="text/html", headers={"Cache-Control": "no-cache"})

    async def asset(file: str) -> Response:
        """A file of the bundle; nothing outside the assets folder, nothing hidden."""
        root = assets.resolve()
        wanted = (root / file).resolve()
        if not wanted.is_relative_to(root) or any(p.startswith(".") for p in Path(file).parts):
            raise NotFound(f"asset {file} not found")
        if not wanted.is_file():
            raise NotFound(f"asset {file} not found")
        return FileResponse(wanted)

    # on the app itself, not an included router: its plain routes are what a 405's Allow lists
    for path in PAGES:
        app.add_api_route(path, page, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_api_route(
        "/assets/{file:path}", asset, methods=["GET", "HEAD"], include_in_schema=False
    )
