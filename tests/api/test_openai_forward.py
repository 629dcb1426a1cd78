"""The chat playground's call: a service's OpenAI route through the API, forwarded to the
serving router with the caller's credentials and streamed back as it comes."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from anyio import to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.testclient import TestClient
from live_server import serve_in_thread

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.services import serving
from kiban.services.auth import Principal
from kiban.serving.router.table import Endpoint, Route
from kiban.web.csrf import CSRF_COOKIE

ALICE = Principal(name="alice", tenant="vision", is_admin=False)


@dataclass
class Router:
    """A stand-in for the serving router: records what it was sent; a streamed answer sends
    its second event only once ``release`` is set."""

    url: str = ""
    seen: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def router_app(router: Router) -> FastAPI:
    app = FastAPI()

    @app.post("/openai/v1/{path:path}")  # a replica behind the real router
    async def replica(path: str, request: Request) -> Response:
        return await answer("", "", path, request)

    @app.post("/s/{tenant}/{name}/openai/v1/{path:path}")
    async def answer(tenant: str, name: str, path: str, request: Request) -> Response:
        body = await request.json()
        router.seen.append(
            {
                "path": request.url.path,
                "authorization": request.headers.get("authorization"),
                "body": body,
            }
        )
        if body.get("model") == "busy":
            return JSONResponse({"error": {"message": "queue full"}}, status_code=429)
        if not body.get("stream"):
            return JSONResponse({"data": [{"embedding": [0.5, 0.25]}]})

        async def events() -> AsyncIterator[bytes]:
            yield b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
            await to_thread.run_sync(router.release.wait, 30)
            yield b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n'
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


@pytest.fixture
def router(platform: Platform, monkeypatch: pytest.MonkeyPatch) -> Iterator[Router]:
    stand_in = Router()
    with serve_in_thread(router_app(stand_in)) as server:
        stand_in.url = f"http://{server.host}:{server.port}"
        monkeypatch.setattr(
            platform, "service_url", lambda tenant, name: f"{stand_in.url}/s/{tenant}/{name}"
        )
        yield stand_in
        stand_in.release.set()


@pytest.fixture
def alice(api: TestClient, platform: Platform) -> str:
    """Alice's token; her tenant vision has a service "chat"."""
    assert api.post("/api/v1/tenants", json={"name": "vision"}).status_code == 201
    queue = {"name": "vision-q", "tenant": "vision", "quota": {"gpu": 2}}
    assert api.post("/api/v1/queues", json=queue).status_code == 201
    token = api.post("/api/v1/tenants/vision/tokens", json={"name": "alice"}).json()["token"]
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": "chat"},
        "spec": {
            "queue": "vision-q",
            "model": {"name": "tiny", "storageUri": "file:///models/tiny"},
            "resources": {"gpu": 1},
        },
    }
    with platform.sessions() as session:
        serving.apply(session, ALICE, document, facts=platform.facts, at=platform.clock.now())
        session.commit()
    return str(token)


CHAT = {"model": "tiny", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def test_a_streamed_reply_arrives_piece_by_piece_with_the_callers_token(
    platform: Platform, router: Router, alice: str
) -> None:
    with serve_in_thread(create_app(platform)) as kiban:
        url = f"http://{kiban.host}:{kiban.port}/api/v1/services/chat/openai/chat/completions"
        headers = {"Authorization": f"Bearer {alice}"}
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", url, json=CHAT, headers=headers) as answer,
        ):
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/event-stream")
            pieces = answer.iter_raw()
            first = next(pieces)
            assert b'"Hel"' in first and b'"lo"' not in first  # came before the rest existed
            router.release.set()
            rest = b"".join(pieces)
    assert b'"lo"' in rest and rest.endswith(b"data: [DONE]\n\n")
    [call] = router.seen
    assert call["path"] == "/s/vision/chat/openai/v1/chat/completions"
    assert call["authorization"] == f"Bearer {alice}"
    assert call["body"] == CHAT


def test_the_dashboards_cookie_is_forwarded_as_the_token(
    platform: Platform, router: Router, alice: str
) -> None:
    with TestClient(create_app(platform)) as browser:
        assert browser.post("/web/session", json={"token": alice}).status_code == 200
        body = {"model": "tiny", "input": ["hello"]}
        refused = browser.post("/api/v1/services/chat/openai/embeddings", json=body)
        assert refused.status_code == 403  # no CSRF token
        answer = browser.post(
            "/api/v1/services/chat/openai/embeddings",
            json=body,
            headers={"X-CSRF-Token": browser.cookies[CSRF_COOKIE]},
        )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"data": [{"embedding": [0.5, 0.25]}]}
    assert [c["authorization"] for c in router.seen] == [f"Bearer {alice}"]


def test_the_routers_status_and_error_pass_through(
    api: TestClient, router: Router, alice: str
) -> None:
    answer = api.post(
        "/api/v1/services/chat/openai/completions", json={"model": "busy", "prompt": "x"}
    )
    assert answer.status_code == 429
    assert answer.json() == {"error": {"message": "queue full"}}


def test_another_tenants_service_is_404_and_reaches_no_router(
    api: TestClient, platform: Platform, router: Router, alice: str
) -> None:
    assert api.post("/api/v1/tenants", json={"name": "speech"}).status_code == 201
    bob = api.post("/api/v1/tenants/speech/tokens", json={"name": "bob"}).json()["token"]
    with TestClient(create_app(platform), headers={"Authorization": f"Bearer {bob}"}) as client:
        answer = client.post("/api/v1/services/chat/openai/chat/completions", json=CHAT)
        other = client.post("/api/v1/services/chat/openai/models", json={})
    assert answer.status_code == 404
    assert other.status_code in (404, 422)
    assert router.seen == []


def test_without_a_router_the_call_is_409(api: TestClient, alice: str) -> None:
    answer = api.post("/api/v1/services/chat/openai/chat/completions", json=CHAT)
    assert answer.status_code == 409
    assert "router" in answer.json()["error"]["message"]


def test_the_call_goes_through_the_real_serving_router(platform: Platform, alice: str) -> None:
    """The path the API forwards to is one the router serves, and the router takes the
    caller's token as its tenant's."""
    replica = Router()
    replica.release.set()
    platform.start_router("127.0.0.1", 0)
    with serve_in_thread(router_app(replica)) as server:
        endpoint = Endpoint("r1", f"{server.host}:{server.port}", ready=True)
        platform.routes.set(Route("vision", "chat", {"r1": 100}, (endpoint,)))
        with TestClient(
            create_app(platform), headers={"Authorization": f"Bearer {alice}"}
        ) as client:
            answer = client.post("/api/v1/services/chat/openai/chat/completions", json=CHAT)
    assert answer.status_code == 200, answer.text
    assert answer.text.endswith("data: [DONE]\n\n")
    assert [c["path"] for c in replica.seen] == ["/openai/v1/chat/completions"]
