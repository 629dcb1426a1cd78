"""The /nb/ route in front of a fake Jupyter: who gets in (bearer token, the dashboard's cookie
with its CSRF header, the owner or an admin only), what is forwarded, and that Jupyter's token
goes in and never comes back out."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.domain.notebook_culling import JupyterActivity
from kiban.platform import Platform


@pytest.fixture
def seen() -> list[httpx.Request]:
    return []


@pytest.fixture
def running(api: TestClient, platform: Platform, seen: list[httpx.Request]) -> Iterator[str]:
    """Alice's token, her notebook ``lab`` Running, and a fake Jupyter behind the route."""
    assert platform.notebooks is not None
    platform.notebooks.probe = lambda base, token: JupyterActivity(platform.clock.now())
    assert api.post("/api/v1/tenants", json={"name": "vision"}).status_code == 201
    queue = {"name": "vision-q", "tenant": "vision", "quota": {"gpu": 2}}
    assert api.post("/api/v1/queues", json=queue).status_code == 201
    token = api.post("/api/v1/tenants/vision/tokens", json={"name": "alice"}).json()["token"]
    with TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"}) as alice:
        assert alice.post("/api/v1/notebooks", json={"name": "lab"}).status_code == 201
    platform.loop.run_once()
    platform.notebooks.run_once(platform.clock.now())

    def jupyter(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        secret = request.headers.get("authorization", "").removeprefix("token ")
        page = f'<script id="jupyter-config-data">{{"token": "{secret}"}}</script>'
        return httpx.Response(200, headers={"content-type": "text/html"}, text=page)

    fake = httpx.AsyncClient(transport=httpx.MockTransport(jupyter))
    platform._notebook_http = fake  # type: ignore[attr-defined]
    yield token


def test_a_bearer_token_reaches_jupyter_which_gets_its_own_token_never_shown(
    platform: Platform, running: str, seen: list[httpx.Request]
) -> None:
    with TestClient(create_app(platform), cookies={"_xsrf": "jupyters-own"}) as client:
        answer = client.get(
            "/nb/vision/lab/lab?x=1", headers={"Authorization": f"Bearer {running}"}
        )
    assert answer.status_code == 200, answer.text
    forwarded = seen[-1]
    assert forwarded.url.path == "/nb/vision/lab/lab" and forwarded.url.query == b"x=1"
    jupyter_token = forwarded.headers["authorization"].removeprefix("token ")
    assert len(jupyter_token) == 64 and running not in str(forwarded.headers)
    assert forwarded.headers.get("cookie") == "_xsrf=jupyters-own"
    assert jupyter_token not in answer.text and '"token": ""' in answer.text


def test_the_dashboard_cookie_needs_the_csrf_header_on_unsafe_methods(
    platform: Platform, running: str, seen: list[httpx.Request]
) -> None:
    cookies = {"kiban_session": running, "kiban_csrf": "c5rf"}
    with TestClient(create_app(platform), cookies=cookies) as client:
        assert client.get("/nb/vision/lab/api/contents").status_code == 200
        refused = client.post("/nb/vision/lab/api/contents", json={})
        assert refused.status_code == 403 and "CSRF" in refused.json()["error"]["message"]
        wrong = client.post("/nb/vision/lab/api/contents", headers={"X-CSRF-Token": "no"})
        assert wrong.status_code == 403
        sent = client.post("/nb/vision/lab/api/contents", headers={"X-CSRF-Token": "c5rf"})
        assert sent.status_code == 200
    assert len(seen) == 2  # the refused ones never reached Jupyter
    assert all("kiban_session" not in r.headers.get("cookie", "") for r in seen)


def test_no_token_a_bad_one_or_another_member_never_reach_it(
    api: TestClient, platform: Platform, running: str, seen: list[httpx.Request]
) -> None:
    bob = api.post("/api/v1/tenants/vision/tokens", json={"name": "bob"}).json()["token"]
    with TestClient(create_app(platform)) as client:
        assert client.get("/nb/vision/lab/").status_code == 401
        bad = client.get("/nb/vision/lab/", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401
        other = client.get("/nb/vision/lab/", headers={"Authorization": f"Bearer {bob}"})
        assert other.status_code == 404
        missing = client.get("/nb/vision/nope/", headers={"Authorization": f"Bearer {running}"})
        assert missing.status_code == 404
    assert seen == []
    admin = api.get("/nb/vision/lab/api/status")  # an admin may
    assert admin.status_code == 200


def test_a_server_that_does_not_answer_is_a_502_naming_its_address(
    platform: Platform, running: str
) -> None:
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    platform._notebook_http = httpx.AsyncClient(  # type: ignore[attr-defined]
        transport=httpx.MockTransport(unreachable)
    )
    with TestClient(create_app(platform)) as client:
        answer = client.get("/nb/vision/lab/api", headers={"Authorization": f"Bearer {running}"})
    assert answer.status_code == 502
    message = answer.json()["error"]["message"]
    assert ".fake:" in message and "did not answer" in message and "refused" in message
