"""The route ``/nb/<tenant>/<name>/...``: a notebook's JupyterLab behind kiban's auth.

Who: ``Authorization: Bearer <kiban token>``, else the dashboard's ``kiban_session`` cookie;
a request authenticated by the cookie with an unsafe method carries ``X-CSRF-Token`` equal to
the ``kiban_csrf`` cookie (403 otherwise; the dashboard's own check, ``kiban.web.csrf``), and a
websocket opened with the cookie comes from
kiban's own origin. Only the notebook's owner or an admin gets in; anyone else gets 404.

HTTP is forwarded with httpx, streamed both ways; websockets (kernels, terminals) with the
``websockets`` library, message by message both ways. Jupyter's token is added on the way in
(``Authorization: token ...``) and cut out of any text Jupyter sends back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import websockets
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection, Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect

from kiban.control.settling import replica_ref
from kiban.domain.notebook import ROUTE_PREFIX, NotebookState
from kiban.platform import Platform
from kiban.services import notebooks
from kiban.services.auth import Principal, authenticate
from kiban.services.errors import Forbidden, ServiceError
from kiban.store.models_serving import NotebookRow
from kiban.web.csrf import (
    CSRF_COOKIE,
    SAFE_METHODS,
    SESSION_COOKIE,
    check_csrf,
    credentials,
)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
DROPPED_IN = HOP_BY_HOP | {"authorization", "cookie", "x-csrf-token", "accept-encoding", "origin"}
TEXT_TYPES = ("text/", "application/json", "application/javascript", "application/xml")
ROUTE_TTL_S = 2.0  # how long a notebook's address and token are reused between requests
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class Refused(ServiceError):
    """The answer to a request that does not reach the notebook (the API's error shape)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Upstream:
    """Where a running notebook's server is, and the token it takes."""

    address: str  # host:port
    token: str


def _principal(platform: Platform, connection: HTTPConnection, method: str) -> Principal:
    """The caller (Refused 401/403 otherwise), by the dashboard's rule (``kiban.web.csrf``):
    the ``Authorization`` header, else the session cookie, whose unsafe methods need the CSRF
    header."""
    offered = credentials(connection.scope["headers"])
    header = offered.authorization
    if header is None:
        raise Refused(401, "missing token: send 'Authorization: Bearer <token>' or sign in")
    try:
        check_csrf(method, offered)
    except Forbidden as exc:
        raise Refused(403, str(exc)) from None

    def load() -> Principal | None:
        with platform.sessions() as session:
            try:
                principal = authenticate(session, header, platform.clock.now())
            except ServiceError:
                return None
            session.commit()  # its last use
            return principal

    principal = platform.lookups.get(("principal", header), load)
    if principal is None or principal.expired(platform.clock.now()):
        raise Refused(401, "invalid token")
    if principal.job_id is not None:
        raise Refused(404, "notebook not found")
    return principal


@dataclass(frozen=True)
class Found:
    """A notebook as the route found it: whose it is, and its server or why there is none."""

    tenant: str
    owner: str
    upstream: Upstream | None
    refusal: str = ""


def _find(platform: Platform, tenant: str, name: str) -> Found | None:
    """The notebook (None: no such notebook); a running one's is reused for a few seconds."""

    def load() -> Found | None:
        with platform.sessions() as session:
            row = session.query(NotebookRow).filter_by(tenant=tenant, name=name).one_or_none()
            if row is None:
                return None
            running = notebooks.running_replica(session, row)
            if running is None or row.state != NotebookState.RUNNING.value:
                return Found(row.tenant, row.owner, None, f"notebook {name} is {row.state}")
            job, replica = running
            assert job.master_port is not None
            address = platform.executor.replica_address(replica_ref(replica), job.master_port)
            if address is None or address.startswith("unix:"):
                return Found(row.tenant, row.owner, None, f"notebook {name} has no address yet")
            token = notebooks.token_of(session, tenant, name, job.id)
            session.commit()
            return Found(row.tenant, row.owner, Upstream(address, token))

    found = platform.lookups.get(("notebook", tenant, name), lambda: _running_only(load()))
    return found if found is not None else load()


def _running_only(found: Found | None) -> Found | None:
    return found if found is not None and found.upstream is not None else None


def _resolve(
    platform: Platform, connection: HTTPConnection, method: str
) -> tuple[Principal, Upstream]:
    """The caller and the notebook's server; Refused: 401/403 (who), 404 (not the owner's nor
    an admin's, said before anything else of it), 503 (not running)."""
    tenant = connection.path_params["tenant"]
    name = connection.path_params["name"]
    principal = _principal(platform, connection, method)
    found = _find(platform, tenant, name)
    may = found is not None and (
        principal.is_admin or (principal.tenant == found.tenant and principal.name == found.owner)
    )
    if found is None or not may:
        raise Refused(404, f"notebook {name} not found")
    if found.upstream is None:
        raise Refused(503, f"{found.refusal}, not Running: start it with kiban notebook start")
    return principal, found.upstream


def _client(platform: Platform) -> httpx.AsyncClient:
    client: httpx.AsyncClient | None = getattr(platform, "_notebook_http", None)
    if client is None:
        client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(60.0, connect=5.0))
        platform._notebook_http = client  # type: ignore[attr-defined]
    return client


def _headers_in(connection: HTTPConnection, token: str) -> list[tuple[str, str]]:
    headers = [(k, v) for k, v in connection.headers.items() if k not in DROPPED_IN]
    kept = [
        f"{k}={v}" for k, v in connection.cookies.items() if k not in (SESSION_COOKIE, CSRF_COOKIE)
    ]
    if kept:
        headers.append(("cookie", "; ".join(kept)))
    headers.append(("authorization", f"token {token}"))
    return headers


def scrub(text: bytes, token: str) -> bytes:
    """Jupyter's answer with its token cut out (its pages carry it in their config)."""
    return text.replace(token.encode(), b"")


async def proxy_http(request: Request) -> Response:
    platform: Platform = request.app.state.platform
    _, upstream = await run_in_threadpool(_resolve, platform, request, request.method)
    url = f"http://{upstream.address}{request.url.path}"
    if request.url.query:
        url += f"?{request.url.query}"
    client = _client(platform)
    body = request.stream() if request.method not in SAFE_METHODS else None
    outgoing = client.build_request(
        request.method, url, headers=_headers_in(request, upstream.token), content=body
    )
    try:
        answer = await client.send(outgoing, stream=True)
    except httpx.HTTPError as exc:
        raise Refused(
            502, f"the notebook's server at {upstream.address} did not answer: {exc}"
        ) from exc
    headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in HOP_BY_HOP]
    kind = answer.headers.get("content-type", "")
    if kind.startswith(TEXT_TYPES):
        try:
            content = scrub(await answer.aread(), upstream.token)
        finally:
            await answer.aclose()
        headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
        response = Response(content, status_code=answer.status_code)
    else:
        response = StreamingResponse(_stream(answer), status_code=answer.status_code)
    response.raw_headers = [
        *[(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        *[(k, v) for k, v in response.raw_headers if k in (b"content-length",)],
    ]
    return response


async def _stream(answer: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in answer.aiter_raw():
            yield chunk
    finally:
        await answer.aclose()


def _same_origin(websocket: WebSocket) -> bool:
    origin = websocket.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == websocket.headers.get("host")


async def proxy_websocket(websocket: WebSocket) -> None:
    platform: Platform = websocket.app.state.platform
    try:
        if "authorization" not in websocket.headers and not _same_origin(websocket):
            raise Refused(403, "a websocket signed in by cookie must come from kiban's origin")
        _, upstream = await run_in_threadpool(_resolve, platform, websocket, "GET")
    except Refused as refused:
        await websocket.close(code=4000 + refused.status, reason=refused.detail[:120])
        return
    url = f"ws://{upstream.address}{websocket.url.path}"
    if websocket.url.query:
        url += f"?{websocket.url.query}"
    offered = websocket.scope.get("subprotocols") or []
    try:
        server = await connect(
            url,
            additional_headers={"Authorization": f"token {upstream.token}"},
            subprotocols=offered or None,
            max_size=None,
            compression=None,
            open_timeout=10,
        )
    except (OSError, websockets.exceptions.WebSocketException, TimeoutError):
        await websocket.close(code=1011, reason="the notebook did not answer")
        return
    await websocket.accept(subprotocol=server.subprotocol)
    async with server:
        inbound = asyncio.create_task(_to_server(websocket, server))
        outbound = asyncio.create_task(_to_client(websocket, server))
        _done, pending = await asyncio.wait(
            {inbound, outbound}, return_when=asyncio.FIRST_COMPLETED
        )
        for task in pending:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    with contextlib.suppress(Exception):
        await websocket.close()


async def _to_server(websocket: WebSocket, server: ClientConnection) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("bytes") is not None:
            await server.send(message["bytes"])
        elif message.get("text") is not None:
            await server.send(message["text"])


async def _to_client(websocket: WebSocket, server: ClientConnection) -> None:
    with contextlib.suppress(websockets.exceptions.ConnectionClosed, WebSocketDisconnect):
        async for message in server:
            if isinstance(message, bytes):
                await websocket.send_bytes(message)
            else:
                await websocket.send_text(message)


async def _add_slash(request: Request) -> Response:
    return RedirectResponse(request.url.path + "/", status_code=307)


PATH = ROUTE_PREFIX + "/{tenant}/{name}/{path:path}"
routes: list[BaseRoute] = [
    Route(ROUTE_PREFIX + "/{tenant}/{name}", _add_slash, methods=["GET", "HEAD"]),
    Route(PATH, proxy_http, methods=METHODS),
    WebSocketRoute(PATH, proxy_websocket),
]
"""The routes ``create_app`` mounts."""
