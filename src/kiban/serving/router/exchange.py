"""One request through the router: route it, wait for a replica, connect, forward the request,
pass the answer back (see ``proxy`` for why it is written at this level)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING

import httptools

from kiban.serving.router.messages import (
    DROPPED_HEADERS,
    ERROR_TYPES,
    content_length,
    error_response,
    forwarded_path,
)
from kiban.serving.router.table import Endpoint, Route, ServiceKey
from kiban.serving.router.traffic import RevisionCounter
from kiban.serving.router.upstream import UpstreamConnection

if TYPE_CHECKING:
    from kiban.serving.router.proxy import ClientConnection

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
MAX_HEAD = 64 * 1024
"""An answer's head longer than this is passed on before it is complete."""
MAX_BUFFERED_BODY = 1 << 20
"""Body bytes held for a request with nowhere to send them yet (waiting in the queue for a
replica, or for a new connection to one) before the client is paused; reading resumes once
they are sent."""


class Exchange:
    """One request through the router: route, wait, connect, forward, pass the answer back."""

    __slots__ = (
        "_body",
        "_body_size",
        "_chunked",
        "_connecting",
        "_continue",
        "_deadline",
        "_forwarded",
        "_has_body",
        "_headers",
        "_held",
        "_method",
        "_pending_head",
        "_remaining",
        "_request_complete",
        "_response_complete",
        "_response_parser",
        "_revision_line",
        "_started",
        "_tried",
        "_upstream_keep_alive",
        "_url",
        "_wait_until",
        "client",
        "counter",
        "dispatcher",
        "done",
        "endpoint",
        "keep_alive",
        "key",
        "response_started",
        "revision",
        "route",
        "upstream",
    )

    def __init__(
        self,
        client: ClientConnection,
        method: bytes,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        *,
        keep_alive: bool,
    ) -> None:
        self.client = client
        self.dispatcher = client.dispatcher
        self._method = method
        self._url = url
        self._headers = headers
        self.keep_alive = keep_alive
        self._body: list[bytes] = []
        self._body_size = 0
        self._chunked = False
        self._forwarded = b""
        self._held = False
        self._has_body = False
        """The request's head announces a body (Content-Length above 0, or chunked)."""
        self._continue = False
        self._request_complete = False
        self._started = 0.0
        self._deadline = math.inf
        self._wait_until = math.inf
        """While the request waits for a replica: when it gives up; else infinity."""
        self._connecting: asyncio.Task[None] | None = None
        self._tried: tuple[str, ...] = ()
        self._pending_head = b""
        self._remaining = 0
        self._revision_line = b""
        self._response_parser: httptools.HttpResponseParser | None = None
        self._response_complete = False
        self._upstream_keep_alive = False
        self.response_started = False
        self.done = False
        self.route: Route | None = None
        self.key: ServiceKey = ("", "")
        self.revision = ""
        self.counter: RevisionCounter | None = None
        self.endpoint: Endpoint | None = None
        self.upstream: UpstreamConnection | None = None

    # -- the request ---------------------------------------------------------------------------
    def begin(self) -> None:
        """Route the request: answer an error, or send it to a replica, or queue it."""
        self._started = time.perf_counter()
        dispatcher = self.dispatcher
        path = self._url.partition(b"?")[0]
        parts = path.split(b"/", 4)
        if len(parts) < 4 or parts[0] != b"" or parts[1] != b"s":
            self.answer(404, "not a service URL; services are at /s/{tenant}/{service}")
            return
        plan = dispatcher.plan(parts[2], parts[3])
        if plan is None:
            tenant, service = dispatcher.service_key(parts[2], parts[3])
            self.answer(404, f"no service {service!r} of tenant {tenant!r}")
            return
        route = plan.route
        authorization = self._read_headers()
        if not route.public and not self._authorized(route.tenant, authorization):
            self.answer(401, "a valid 'Authorization: Bearer <token>' of the tenant is required")
            return
        rest = parts[4] if len(parts) == 5 else b""
        if not forwarded_path(rest):
            self.answer(404, "the router forwards /openai/v1/... and /v2/... of a service")
            return
        # "/s/{tenant}/{service}" cut off: what is left is "/" + rest, then the query if any
        self._url = self._url[len(parts[2]) + len(parts[3]) + 4 :]
        if self._continue:  # the client waits for a go before it sends the body
            self.client.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.route = route
        self.key = plan.key
        chosen = plan.only or plan.revisions[dispatcher.balancer.revision(route)]
        self.revision = revision = chosen.revision
        self.counter = counter = chosen.counter
        self._revision_line = chosen.line
        self._deadline = deadline = self._started + route.timeout_s
        if deadline < dispatcher.check_at:
            dispatcher.watch(deadline)
        endpoint = chosen.only or dispatcher.balancer.endpoint(route, revision)
        if endpoint is not None:
            counter.started()
            self._attach(endpoint)
            return
        if not dispatcher.enqueue(self, route.queue_limit):
            self.answer(503, f"{route.queue_limit} requests already wait for a replica", "full")
            return
        counter.was_queued()
        self._wait_until = self._started + route.activation_timeout_s
        self.dispatcher.watch(self._wait_until)

    def _read_headers(self) -> bytes | None:
        """One pass over the request's headers: those to forward, framing, the token."""
        forwarded: list[bytes] = []
        authorization = None
        for name, value in self._headers:
            lowered = name.lower()
            if lowered in DROPPED_HEADERS:
                if lowered == b"authorization":
                    authorization = value
                elif lowered == b"expect" and value.lower() == b"100-continue":
                    self._continue = True
                continue
            if lowered == b"transfer-encoding":
                self._has_body = True
                if b"chunked" in value.lower():
                    self._chunked = True
            elif lowered == b"content-length" and value.strip(b" \t") != b"0":
                self._has_body = True
            forwarded += (name, b": ", value, b"\r\n")
        self._forwarded = b"".join(forwarded)
        return authorization

    def _authorized(self, tenant: str, authorization: bytes | None) -> bool:
        if authorization is None:
            return False
        scheme, _, token = authorization.decode("latin-1").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return False
        try:
            return self.dispatcher.authorize(tenant, token)
        except Exception:  # a broken check must not open the door, nor end the connection
            log.exception("authorize(%r, ...) failed; the request is refused", tenant)
            return False

    def request_body(self, data: bytes) -> None:
        if self.done:
            return
        if self._chunked:
            data = b"%x\r\n%b\r\n" % (len(data), data)
        if self.upstream is not None and not self._held:
            self.upstream.write(data)
            return
        self._body.append(data)
        if self._held:
            return
        self._body_size += len(data)
        if self._body_size > MAX_BUFFERED_BODY:
            self.client.body_full(self)

    def request_complete(self) -> None:
        self._request_complete = True
        if self.done or not self._chunked:
            return
        if self.upstream is not None and not self._held:
            self.upstream.write(b"0\r\n\r\n")
        else:
            self._body.append(b"0\r\n\r\n")

    # -- waiting for a replica -----------------------------------------------------------------
    def dispatched(self, route: Route, endpoint: Endpoint) -> None:
        """The queue handed this waiting request a replica."""
        self._wait_until = math.inf
        self._counted().dequeued(dispatched=True)
        self.route = route
        self._attach(endpoint)

    def give_up(self, status: int, message: str, kind: str | None = None) -> None:
        """Stop waiting and answer an error (the queue has already let go of this request)."""
        self._counted().dequeued(dispatched=False)
        self._wait_until = math.inf
        self.answer(status, message, kind)

    def check_deadlines(self, now: float) -> float:
        """End this exchange if a deadline has passed; else the earliest deadline left.

        Called by the dispatcher's deadline timer (``now`` from ``time.perf_counter``).
        """
        if self.done:
            return math.inf
        if now >= self._wait_until and self._wait_until < self._deadline:  # a tie: timeout
            self._activation_expired()
            return math.inf
        if now >= self._deadline:
            self._timed_out()
            return math.inf
        return min(self._deadline, self._wait_until)

    def _activation_expired(self) -> None:
        self.dispatcher.withdraw(self)
        route = self.route
        waited = route.activation_timeout_s if route is not None else 0.0
        self.give_up(503, f"no replica of revision {self.revision} was ready after {waited:g} s")

    # -- connecting ----------------------------------------------------------------------------
    def _attach(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.dispatcher.balancer.acquire(endpoint)
        conn = self.dispatcher.pool.take(endpoint.address)
        if conn is not None:
            self._send(conn)
        else:
            self._connecting = self.dispatcher.loop.create_task(self._connect(endpoint))

    async def _connect(self, endpoint: Endpoint) -> None:
        try:
            conn = await asyncio.wait_for(
                self.dispatcher.pool.open(endpoint.address), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError):
            self._connecting = None
            if self.done:
                return
            self._connect_failed(endpoint)
            return
        self._connecting = None
        if self.done:
            self.dispatcher.pool.give_back(conn)
            return
        self._send(conn)

    def _connect_failed(self, endpoint: Endpoint) -> None:
        """Nothing was sent: another ready replica of the revision may take the request."""
        self.dispatcher.balancer.release(endpoint)
        self.endpoint = None
        self._tried += (endpoint.address,)
        route = self.dispatcher.table.route(self.key) or self.route
        assert route is not None
        self.route = route
        retry = self.dispatcher.balancer.endpoint(route, self.revision, exclude=self._tried)
        if retry is not None:
            self._attach(retry)
            return
        self._finish_with_error(502, f"could not connect to a replica of revision {self.revision}")

    def _send(self, conn: UpstreamConnection) -> None:
        assert self.endpoint is not None
        self.upstream = conn
        conn.exchange = self
        head = b"%b %b HTTP/1.1\r\n%b%b\r\n" % (
            self._method,
            self._url,
            conn.host_line,
            self._forwarded,
        )
        if self._body:
            head += b"".join(self._body)
            self._body = []
        if self._body_size > MAX_BUFFERED_BODY:
            # the client was paused while there was nowhere to send its body: now there is
            # (resumed whether this request waited in the queue or for a new connection)
            self.client.body_sent(self)
        self._body_size = 0
        if self._has_body and self.client.feeding:
            # the body may follow in the same read: head and body go in one write (one
            # system call, one TCP segment), once the read is parsed
            self._body.append(head)
            self._held = True
            self.client.hold(self)
        else:
            conn.write(head)

    def release_held(self) -> None:
        """Send what was held while the client's read was parsed (see ``_send``)."""
        self._held = False
        held, self._body = self._body, []
        if not self.done and self.upstream is not None:
            self.upstream.write(held[0] if len(held) == 1 else b"".join(held))

    # -- the answer ----------------------------------------------------------------------------
    def upstream_data(self, data: bytes) -> None:
        """Bytes of the replica's answer: pass them on as they come, revision header added.

        The answer's end is found by counting bytes when its head gives a Content-Length
        (the usual case, and the cheapest), else by an httptools parser (chunked streams).
        """
        if self.done:
            return
        if not self.response_started:
            self._answer_head(data)
            return
        self.client.write(data)
        parser = self._response_parser
        if parser is None:
            self._remaining -= len(data)
            if self._remaining <= 0:
                self._complete(
                    upstream_reusable=self._upstream_keep_alive and self._request_complete
                )
            return
        self._feed(parser, data)

    def _answer_head(self, data: bytes) -> None:
        if self._pending_head:
            data = self._pending_head + data
        head_end = data.find(b"\r\n\r\n")
        if head_end < 0 and len(data) < MAX_HEAD:
            self._pending_head = data
            return
        self._pending_head = b""
        self.response_started = True
        self.client.write(data.replace(b"\r\n", self._revision_line, 1))  # after the status
        length = content_length(data[:head_end].lower()) if head_end >= 0 else None
        if length is None:
            parser = self._response_parser = httptools.HttpResponseParser(self)
            self._feed(parser, data)
            return
        self._upstream_keep_alive = length[1]
        self._remaining = 0 if self._method == b"HEAD" else head_end + 4 + length[0] - len(data)
        if self._remaining <= 0:
            self._complete(upstream_reusable=self._upstream_keep_alive and self._request_complete)

    def _feed(self, parser: httptools.HttpResponseParser, data: bytes) -> None:
        try:
            parser.feed_data(data)
        except httptools.HttpParserError:
            self._cut_off()
            return
        if self._response_complete:
            self._complete(upstream_reusable=self._upstream_keep_alive and self._request_complete)

    def on_headers_complete(self) -> None:
        # asked now: once the message is complete the parser has reset its flags
        assert self._response_parser is not None
        self._upstream_keep_alive = self._response_parser.should_keep_alive()
        if self._method == b"HEAD":
            self._response_complete = True

    def on_message_complete(self) -> None:
        self._response_complete = True

    def upstream_lost(self) -> None:
        """The replica's connection closed before its answer was complete."""
        self.upstream = None
        if self.done:
            return
        if not self.response_started:
            self._finish_with_error(
                502, f"the replica of revision {self.revision} closed the connection unanswered"
            )
        else:
            self._cut_off()

    def _cut_off(self) -> None:
        """The answer broke off after it began: the client must see the connection close."""
        self._finish(ok=False)
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.exchange = None
            upstream.close()
        self.client.close()

    def _timed_out(self) -> None:
        if self._wait_until != math.inf:
            self.dispatcher.withdraw(self)
            route = self.route
            self.give_up(504, f"no answer within {route.timeout_s if route else 0:g} s")
            return
        limit = self.route.timeout_s if self.route is not None else 0.0
        message = f"the replica gave no complete answer within {limit:g} s"
        if not self.response_started:
            self._finish_with_error(504, message)
        else:
            self._cut_off()

    # -- endings -------------------------------------------------------------------------------
    def answer(self, status: int, message: str, kind: str | None = None) -> None:
        """The router answers itself (an error); the connection stays open when it can."""
        if self.done:
            return
        self.done = True
        keep_alive = self.keep_alive  # what is left of the request's body is read and dropped
        self.client.write(
            error_response(
                status,
                message,
                kind or ERROR_TYPES.get(status, "error"),
                keep_alive=keep_alive,
                revision=self.revision,
            )
        )
        self.client.exchange_done(self, keep_alive=keep_alive)

    def _finish_with_error(self, status: int, message: str) -> None:
        """An error after the request was given to a replica; that replica's connection goes."""
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.exchange = None
            upstream.close()
        self._finish(ok=False)
        self.done = False  # so that answer() writes
        self.answer(status, message)

    def _complete(self, *, upstream_reusable: bool) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            if upstream_reusable:
                if upstream.paused:
                    upstream.resume_reading()
                self.dispatcher.pool.give_back(upstream)
            else:
                upstream.exchange = None
                upstream.close()
        # the replica's own Connection header went to the client as it was
        keep_alive = self.keep_alive and self._upstream_keep_alive
        self._finish(ok=True)
        self.client.exchange_done(self, keep_alive=keep_alive)

    def _finish(self, *, ok: bool) -> None:
        """Release the replica, count the request, wake the next waiter."""
        if self.done:
            return
        self.done = True
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            self.dispatcher.balancer.release(endpoint)
        if self.counter is not None:
            self.counter.finished(time.perf_counter() - self._started, ok=ok)
        if endpoint is not None:
            self.dispatcher.released(self.key, self.revision)

    def _counted(self) -> RevisionCounter:
        """The revision's counters (set once the request is routed)."""
        assert self.counter is not None
        return self.counter

    def client_lost(self) -> None:
        """The client went away: stop waiting, or drop the replica's connection mid-answer."""
        if self.done:
            return
        if self.route is None:
            self.done = True
            return
        if self._wait_until != math.inf:
            self.dispatcher.withdraw(self)
            self._counted().dequeued(dispatched=False)
            self._wait_until = math.inf
            self.done = True
            return
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.exchange = None
            upstream.close()
        self._finish(ok=False)
