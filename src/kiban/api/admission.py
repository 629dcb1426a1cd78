"""Admission: who calls, and whether the API has room for the call, decided before the call's
body is read and before it takes a worker thread or a store connection.

For every request under ``/api/``, in this order:

1. the bearer token (the ``Authorization`` header, else the dashboard's session cookie): a
   principal cached a moment ago is taken on the event loop; otherwise one short store read
   on a worker thread, shared by the requests that carry the same token at once (it notes
   the token's last use, at most once a minute). No token, a bad, revoked or expired one:
   401 (revoking a token forgets the cached principals; an expired one is read again); a
   job's token beyond its job: 403; a change made on the cookie without the CSRF header that
   matches it, 403 (``kiban.web.csrf``). Nothing of the body is
   read for either, and the connection is closed after the answer when a body was on its way.
   A refused request whose method and path name no operation of the API is routed instead,
   as any caller's would be (404, 405 with ``Allow``, a redirect): no endpoint runs for it;
2. the body's size: declared above ``max_body_bytes``, 413 at once; found above it while it is
   read (chunked), 413 then;
3. room: a principal has ``max_requests_per_principal`` requests in flight at most, and more
   wait their turn (up to ``max_waiting_per_principal`` of them, ``queue_wait_s`` each); all
   principals together have ``max_requests``, with the same kind of line. Log follows last as
   long as their jobs, so they are counted apart (``max_follows_per_principal``,
   ``max_follows``) and do not wait. No room: 503 with ``Retry-After``, at once or after the
   wait, never a hang; one member's burst cannot take the others' turns.

``/healthz`` is answered here, before anything else of the app (no thread, no store); on
kiban's own HTTP connections earlier still (``kiban.api.http_protocol``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Hashable
from urllib.parse import parse_qsl

import sqlalchemy.exc
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kiban.api.deps import PRINCIPAL_STATE, allowed
from kiban.api.errors import error_body, error_response
from kiban.api.limits import AdmissionLimits
from kiban.api.slots import Slots
from kiban.platform import Platform
from kiban.services.auth import Principal, authenticate, bearer_token
from kiban.services.errors import ServiceError, Unavailable
from kiban.web.csrf import check_csrf, credentials

API_PREFIX = "/api/"
HEALTH_PATH = "/healthz"
OPEN_PATHS = frozenset({"/api/v1/discovery/prometheus"})  # no token (see routers.metrics)
HEALTHY_BODY = b'{"status":"ok"}'
HEALTHY_HEADERS = ((b"content-type", b"application/json"), (b"content-length", b"15"))
FOLLOW_PATH = re.compile(r"^/api/v1/jobs/[^/]+/logs$")
TRUE_WORDS = frozenset({"1", "true", "t", "yes", "y", "on"})
"""What FastAPI reads as true in a query (``follow=...``)."""


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            f"the request body is larger than {limit / 2**20:g} MiB",
            headers={"Connection": "close"},
        )


class Admission:
    """The ASGI middleware that admits API requests (see the module's docstring).
    ``names_operation``: whether a request's method and path are those of one of the app's
    routes (None: any request is taken to be)."""

    def __init__(
        self,
        app: ASGIApp,
        platform: Platform,
        limits: AdmissionLimits,
        names_operation: Callable[[Scope], bool] | None = None,
    ) -> None:
        self.app = app
        self.platform = platform
        self.limits = limits
        self.names_operation = names_operation
        self.requests = Slots(limits.max_requests, limits.max_waiting, limits.queue_wait_s)
        self.follows = Slots(limits.max_follows)
        self._requests_of: dict[Hashable, Slots] = {}
        self._follows_of: dict[Hashable, Slots] = {}
        self._lookups = Slots(limits.max_token_lookups, limits.max_waiting, limits.queue_wait_s)
        self._looking_up: dict[str, asyncio.Future[Principal]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if path == HEALTH_PATH and scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            await _healthy(scope, send)
            return
        if (
            scope["type"] != "http"
            or not path.startswith(API_PREFIX)
            or path in OPEN_PATHS
            or _preflight(scope)
        ):
            await self.app(scope, receive, send)
            return
        offered = credentials(scope["headers"])
        length, chunked = _request_headers(scope)
        has_body = chunked or (length is not None and length.strip() not in ("", "0"))
        try:
            principal = await self._principal(offered.authorization)
            scope.setdefault("state", {})[PRINCIPAL_STATE] = principal  # the audit's, if refused
            allowed(principal, scope["method"], path)
            check_csrf(scope["method"], offered)
            _check_length(length, self.limits.max_body_bytes)
        except ServiceError as exc:
            if not self._operation(scope):  # routing answers it, with no caller: no endpoint
                await self.app(scope, receive, send)
                return
            await self._refuse(scope, receive, send, exc, has_body)
            return
        except BodyTooLarge as exc:
            answer = error_response(exc.status_code, str(exc.detail), headers=exc.headers)
            await answer(scope, receive, send)
            return
        follow = _is_follow(scope)
        if follow:
            table, everyone = self._follows_of, self.follows
            mine = _slots_of(table, principal, self.limits.max_follows_per_principal)
        else:
            table, everyone = self._requests_of, self.requests
            mine = _slots_of(
                table,
                principal,
                self.limits.max_requests_per_principal,
                self.limits.max_waiting_per_principal,
                self.limits.queue_wait_s,
            )
        try:
            if not await mine.take():
                refusal = self._busy(principal, mine, follow, own=True)
                await self._refuse(scope, receive, send, refusal, has_body)
                return
            try:
                if not await everyone.take():
                    refusal = self._busy(principal, everyone, follow, own=False)
                    await self._refuse(scope, receive, send, refusal, has_body)
                    return
                try:
                    scope.setdefault("state", {})[PRINCIPAL_STATE] = principal
                    with contextlib.suppress(ClientDisconnect):  # nobody left to answer
                        await self.app(scope, self._bounded(receive), send)
                finally:
                    everyone.give_back()
            finally:
                mine.give_back()
        finally:
            _forget_idle(table, principal)

    def _operation(self, scope: Scope) -> bool:
        return self.names_operation is None or self.names_operation(scope)

    # -- who calls -------------------------------------------------------------------------------
    async def _principal(self, authorization: str | None) -> Principal:
        """The caller (Unauthorized, or Unavailable when no token read came free in time)."""
        bearer_token(authorization)  # malformed or missing: refused without the store
        assert authorization is not None
        cached = self.platform.lookups.peek(("principal", authorization))
        if (
            isinstance(cached, Principal)
            and cached.job_id is None  # a job's token ends early
            and not cached.expired(self.platform.clock.now())  # read again: refused there
        ):
            return cached
        pending = self._looking_up.get(authorization)
        if pending is None:
            if not await self._lookups.take():
                raise Unavailable(
                    "too many tokens are being checked at once; try again",
                    self.limits.retry_after_s,
                )
            pending = asyncio.ensure_future(self._load(authorization))
            self._looking_up[authorization] = pending

            def done(_: object) -> None:
                self._looking_up.pop(authorization, None)
                self._lookups.give_back()

            pending.add_done_callback(done)
        return await asyncio.shield(pending)

    async def _load(self, authorization: str) -> Principal:
        try:
            return await run_in_threadpool(self._read, authorization)
        except (sqlalchemy.exc.TimeoutError, sqlalchemy.exc.OperationalError):
            raise Unavailable(
                "the store is busy (no connection came free in time, or it is locked); try again",
                self.limits.retry_after_s,
            ) from None

    def _read(self, authorization: str) -> Principal:
        """The caller, read from the store in a session of its own (on a worker thread)."""
        since = self.platform.lookups.generation  # a token revoked meanwhile: not kept
        with self.platform.sessions() as session:
            principal = authenticate(session, authorization, self.platform.clock.now())
            session.commit()  # the token's last use, when it is a minute old or more
        if principal.job_id is None:  # a job's token is read each time: it ends with its job
            self.platform.lookups.put(("principal", authorization), principal, since)
        return principal

    # -- answers ---------------------------------------------------------------------------------
    def _busy(self, principal: Principal, slots: Slots, follows: bool, *, own: bool) -> Unavailable:
        what = "log follows" if follows else "requests"
        if own:
            option = "--max-follows-per-principal" if follows else "--max-requests-per-principal"
            message = (
                f"{principal.name} has {slots.capacity} {what} in flight already (the most one "
                f"caller may have, `kiban up {option}`); try again"
            )
        else:
            message = f"the API is at capacity ({slots.capacity} {what} in flight); try again"
        return Unavailable(message, self.limits.retry_after_s)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, exc: ServiceError, has_body: bool
    ) -> None:
        """Answer ``exc`` without reading the body; close the connection after when one was
        sent (the rest of it is not read)."""
        body = json.dumps(error_body(exc.status, exc.message), separators=(",", ":")).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if isinstance(exc, Unavailable):
            headers.append((b"retry-after", str(exc.retry_after_s).encode()))
        if exc.status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        if has_body:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": exc.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _bounded(self, receive: Receive) -> Receive:
        """``receive`` that refuses a body growing past ``max_body_bytes`` (413)."""
        limit = self.limits.max_body_bytes
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        return bounded


async def _healthy(scope: Scope, send: Send) -> None:
    """``/healthz``, answered here: before routing, a thread or the store (the route of the
    same path documents it)."""
    await send({"type": "http.response.start", "status": 200, "headers": list(HEALTHY_HEADERS)})
    body = b"" if scope["method"] == "HEAD" else HEALTHY_BODY
    await send({"type": "http.response.body", "body": body})


def _request_headers(scope: Scope) -> tuple[str | None, bool]:
    """The request's ``Content-Length``, and whether it is chunked (one pass over the raw
    headers: this runs for every request, refused ones first)."""
    length = None
    chunked = False
    for name, value in scope["headers"]:
        if name == b"content-length":
            length = value.decode("latin-1")
        elif name == b"transfer-encoding":
            chunked = True
    return length, chunked


def _check_length(length: str | None, limit: int) -> None:
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise BodyTooLarge(limit)


def _preflight(scope: Scope) -> bool:
    """``OPTIONS``: what a path allows is no secret (the OpenAPI document says it too)."""
    return bool(scope["method"] == "OPTIONS")


def _is_follow(scope: Scope) -> bool:
    if scope["method"] != "GET" or not FOLLOW_PATH.match(scope["path"]):
        return False
    query = scope.get("query_string", b"").decode("latin-1")
    return any(k == "follow" and v.lower() in TRUE_WORDS for k, v in parse_qsl(query))


def _key(principal: Principal) -> Hashable:
    return (principal.tenant, principal.name, principal.job_id)


def _slots_of(
    table: dict[Hashable, Slots],
    principal: Principal,
    capacity: int,
    max_waiting: int = 0,
    wait_s: float = 0.0,
) -> Slots:
    key = _key(principal)
    slots = table.get(key)
    if slots is None:
        slots = table[key] = Slots(capacity, max_waiting, wait_s)
    return slots


def _forget_idle(table: dict[Hashable, Slots], principal: Principal) -> None:
    key = _key(principal)
    slots = table.get(key)
    if slots is not None and slots.idle:
        del table[key]
