"""Admission: the caller is checked before its body is read, a request's store connection is
back in the pool before its answer is sent, and past its limits a caller gets 503 at once.

Driven at the ASGI level, where what the app reads of a request and when it answers are seen
exactly (the live server's tests are in ``test_http_limits.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from kiban.api.admission import Admission
from kiban.api.audit_trail import AuditTrail
from kiban.api.deps import SessionRoute
from kiban.api.limits import AdmissionLimits
from kiban.api.routers import cluster, jobs, policy, services
from kiban.api.slots import Slots
from kiban.platform import Platform
from kiban.testing import eventually_async

Message = dict[str, Any]


class Exchange:
    """One request sent to an ASGI app: what the app read of its body, and its answer."""

    def __init__(
        self,
        method: str,
        path: str,
        *,
        token: str | None,
        body: bytes = b"",
        declared: int | None = None,
        query: bytes = b"",
        content_type: bytes = b"application/json",
    ) -> None:
        headers = [(b"host", b"kiban"), (b"content-type", content_type)]
        if token is not None:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        length = len(body) if declared is None else declared
        if body or declared is not None:
            headers.append((b"content-length", str(length).encode()))
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2),
            "state": {},
        }
        self.body = body
        self.reads = 0
        self.sent: list[Message] = []
        self.on_start: Any = None

    async def receive(self) -> Message:
        self.reads += 1
        return {"type": "http.request", "body": self.body, "more_body": False}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start" and self.on_start is not None:
            self.on_start()
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.sent[0]["headers"]}

    async def run(self, app: Any) -> Exchange:
        await app(self.scope, self.receive, self.send)
        return self


@pytest.fixture
def app(platform: Platform, api: TestClient) -> Any:
    """The app (admission in front of it, behind the audit trail), its lifespan started by
    ``api``."""
    stack = api.app.build_middleware_stack()  # type: ignore[attr-defined]
    assert isinstance(stack, AuditTrail) and isinstance(stack.app, Admission)
    return api.app


def run(exchange: Exchange, app: Any) -> Exchange:
    return asyncio.run(exchange.run(app))


# -- who calls, before the body ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/v1/jobs", b"{not json"),
        ("POST", "/api/v1/jobs", b"[1, 2"),
        ("PUT", "/api/v1/policy", b"{{{"),
        ("POST", "/api/v1/queues", b'{"name": 5}'),
        ("POST", "/api/v1/tenants", b"\xff\xfe"),
        ("POST", "/api/v1/services", b"- a: [\n"),
    ],
)
@pytest.mark.parametrize("token", [None, "kbn_not-a-token"])
def test_a_malformed_body_without_a_good_token_is_401_and_not_read(
    app: Any, method: str, path: str, body: bytes, token: str | None
) -> None:
    exchange = run(Exchange(method, path, token=token, body=body), app)
    assert exchange.status == 401, exchange.sent
    assert exchange.reads == 0
    assert exchange.headers["www-authenticate"] == "Bearer"
    assert exchange.headers["connection"] == "close"  # the rest of the body is not read


def test_an_unauthenticated_50_mb_submission_is_answered_401_without_reading_it(app: Any) -> None:
    exchange = run(Exchange("POST", "/api/v1/jobs", token=None, declared=50 << 20), app)
    assert exchange.status == 401
    assert exchange.reads == 0


def test_a_job_token_beyond_its_job_is_403_before_its_body(
    api: TestClient, platform: Platform, app: Any
) -> None:
    from kiban.services.auth import create_job_token

    with platform.sessions() as session:
        token = create_job_token(session, job_id="train-abcdef", tenant="default", at=0.0)
        session.commit()
    exchange = run(Exchange("POST", "/api/v1/jobs", token=token, body=b"{broken"), app)
    assert exchange.status == 403
    assert exchange.reads == 0


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/api/v1/jobs/train-abcdef/checkpoint/../cancel", 404),  # no such operation
        ("HEAD", "/api/v1/jobs/eval-abcdef", 405),  # a path of the API, not that method
        ("POST", "/api/v1/jobs/eval-abcdef", 405),
    ],
)
def test_a_job_tokens_target_that_names_no_operation_is_routed_as_for_anyone(
    platform: Platform, app: Any, method: str, path: str, status: int
) -> None:
    """No endpoint runs for it (403 is for operations beyond its job), and its body is not
    read."""
    from kiban.services.auth import create_job_token

    with platform.sessions() as session:
        token = create_job_token(session, job_id="train-abcdef", tenant="default", at=0.0)
        session.commit()
    exchange = run(Exchange(method, path, token=token, body=b"{broken"), app)
    assert exchange.status == status, exchange.sent
    assert exchange.reads == 0


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("DELETE", "/api/v1/jobs", 405),
        ("POST", "/api/v1/nowhere", 404),
        ("GET", "/api/v1/jobs/", 307),
    ],
)
@pytest.mark.parametrize("token", [None, "kbn_not-a-token"])
def test_without_a_good_token_a_target_that_names_no_operation_is_routed(
    app: Any, method: str, path: str, status: int, token: str | None
) -> None:
    """As OPTIONS, what routing answers tells nothing a caller's token would hide."""
    exchange = run(Exchange(method, path, token=token, body=b"{broken"), app)
    assert exchange.status == status, exchange.sent
    assert exchange.reads == 0


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_body_declared_over_the_limit_is_413_on_any_operation(
    app: Any, admin_token: str, method: str
) -> None:
    exchange = run(Exchange(method, "/api/v1/queues", token=admin_token, declared=50 << 20), app)
    assert exchange.status == 413
    assert exchange.reads == 0


def test_a_body_declared_over_the_limit_is_413_without_reading_it(
    app: Any, admin_token: str
) -> None:
    exchange = run(Exchange("POST", "/api/v1/jobs", token=admin_token, declared=50 << 20), app)
    assert exchange.status == 413
    assert exchange.reads == 0
    assert "larger than 2 MiB" in str(exchange.sent[1]["body"])


def test_a_chunked_body_is_refused_once_it_passes_the_limit(api: TestClient) -> None:
    def chunks() -> Any:
        for _ in range(40):
            yield b" " * (64 * 1024)  # 2.5 MiB in all, no Content-Length

    answer = api.post(
        "/api/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 413, answer.text


# -- connections ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path", ["/api/v1/jobs", "/api/v1/queues", "/api/v1/nodes", "/api/v1/policy", "/api/v1/whoami"]
)
def test_a_request_gives_its_store_connection_back_before_its_answer_is_sent(
    platform: Platform, app: Any, admin_token: str, path: str
) -> None:
    """Its answer is sent at the client's pace (and serialized on another worker thread): a
    connection held meanwhile is one a thread running another request may wait for."""
    run(Exchange("GET", path, token=admin_token), app)  # the token is cached now
    held: list[int] = []
    exchange = Exchange("GET", path, token=admin_token)
    exchange.on_start = lambda: held.append(platform.engine.pool.checkedout())  # type: ignore[attr-defined]
    run(exchange, app)
    assert exchange.status == 200
    assert held == [0]


def test_every_router_closes_its_sessions_on_the_endpoints_thread() -> None:
    for router in (jobs.router, cluster.router, policy.router, services.router):
        for route in router.routes:
            assert isinstance(route, APIRoute)
            assert isinstance(route, SessionRoute), f"{route.path} is not a SessionRoute"


def test_healthz_is_answered_before_routing(app: Any) -> None:
    exchange = run(Exchange("GET", "/healthz", token=None), app)
    assert exchange.status == 200
    assert exchange.sent[1]["body"] == b'{"status":"ok"}'


# -- room -----------------------------------------------------------------------------------------
def test_past_its_follows_a_caller_gets_503_with_retry_after_at_once(
    platform: Platform, admin_token: str
) -> None:
    limits = AdmissionLimits(max_follows_per_principal=2)
    app = NeverAnswers()
    stack = Admission(app, platform, limits)
    query = b"follow=true"

    async def scenario() -> list[int]:
        held = [
            asyncio.ensure_future(
                Exchange("GET", "/api/v1/jobs/x/logs", token=admin_token, query=query).run(stack)
            )
            for _ in range(2)
        ]
        await eventually_async(lambda: app.reached == 2, what="both to hang in the app")
        third = await asyncio.wait_for(
            Exchange("GET", "/api/v1/jobs/x/logs", token=admin_token, query=query).run(stack), 5
        )
        # a plain request of the same caller is not a follow: it has room
        plain = Exchange("GET", "/api/v1/jobs/x/logs", token=admin_token)
        with pytest.raises(TimeoutError):  # admitted: it reached the app, which never answers
            await asyncio.wait_for(plain.run(stack), 0.5)
        for task in held:
            task.cancel()
        assert third.headers["retry-after"] == "1"
        assert "log follows in flight" in str(third.sent[1]["body"])
        return [third.status]

    assert asyncio.run(scenario()) == [503]


def test_a_caller_waits_its_turn_then_gets_503_when_it_does_not_come(
    platform: Platform, admin_token: str
) -> None:
    limits = AdmissionLimits(
        max_requests_per_principal=1, max_waiting_per_principal=1, queue_wait_s=0.3
    )
    app = NeverAnswers()
    stack = Admission(app, platform, limits)

    def in_line() -> int:
        return sum(slots.waiting for slots in stack._requests_of.values())

    async def scenario() -> tuple[int, int]:
        first = asyncio.ensure_future(
            Exchange("GET", "/api/v1/whoami", token=admin_token).run(stack)
        )
        await eventually_async(lambda: app.reached == 1, what="the first to hang in the app")
        waiting = asyncio.ensure_future(
            Exchange("GET", "/api/v1/whoami", token=admin_token).run(stack)
        )
        await eventually_async(lambda: in_line() == 1, what="the second to wait in line")
        # the line is full: refused at once
        full = await asyncio.wait_for(
            Exchange("GET", "/api/v1/whoami", token=admin_token).run(stack), 0.2
        )
        waited = await asyncio.wait_for(waiting, 2)  # its turn did not come in 0.3 s
        first.cancel()
        return full.status, waited.status

    assert asyncio.run(scenario()) == (503, 503)


def test_slots_are_handed_over_in_order() -> None:
    async def scenario() -> list[str]:
        slots = Slots(1, max_waiting=2, wait_s=5)
        order: list[str] = []
        assert await slots.take()

        async def wait(name: str) -> None:
            if await slots.take():
                order.append(name)
                await asyncio.sleep(0.01)
                slots.give_back()

        waiters = [asyncio.ensure_future(wait(n)) for n in ("a", "b")]
        await eventually_async(lambda: slots.waiting == 2, what="both to wait in line")
        assert not await slots.take()  # the line is full
        slots.give_back()
        await asyncio.gather(*waiters)
        assert slots.idle
        return order

    assert asyncio.run(scenario()) == ["a", "b"]


class NeverAnswers:
    """An app that never answers; counts the requests that reached it."""

    def __init__(self) -> None:
        self.reached = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.reached += 1
        await asyncio.Event().wait()
