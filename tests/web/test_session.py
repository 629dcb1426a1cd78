"""Signing in to the dashboard: the session cookie stands for the token, changes need the CSRF
header, the Authorization header wins over the cookie, and tenants stay apart."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.testing import manifest
from kiban.web.csrf import CSRF_COOKIE, SESSION_COOKIE


@dataclass
class Members:
    vision_token: str  # alice, tenant vision (queue vision-q)
    speech_token: str  # bob, tenant speech (queue speech-q)
    speech_job: str


@pytest.fixture
def members(api: TestClient) -> Members:
    tokens = {}
    for tenant, member in (("vision", "alice"), ("speech", "bob")):
        assert api.post("/api/v1/tenants", json={"name": tenant}).status_code == 201
        queue = {"name": f"{tenant}-q", "tenant": tenant, "quota": {"gpu": 2}}
        assert api.post("/api/v1/queues", json=queue).status_code == 201
        made = api.post(f"/api/v1/tenants/{tenant}/tokens", json={"name": member})
        tokens[tenant] = made.json()["token"]
    job = api.post("/api/v1/jobs", json=manifest("speech-train", queue="speech-q"))
    assert job.status_code == 201, job.text
    return Members(tokens["vision"], tokens["speech"], job.json()["id"])


@pytest.fixture
def browser(platform: Platform) -> Iterator[TestClient]:
    """A client with no Authorization header: a browser, with its cookie jar."""
    with TestClient(create_app(platform)) as client:
        yield client


def sign_in(client: TestClient, token: str) -> str:
    """Sign in; returns the CSRF token the page's script would read from its cookie."""
    response = client.post("/web/session", json={"token": token})
    assert response.status_code == 200, response.text
    return client.cookies[CSRF_COOKIE]


def test_signing_in_sets_an_httponly_strict_session_cookie_and_a_csrf_cookie(
    browser: TestClient, members: Members
) -> None:
    response = browser.post("/web/session", json={"token": members.vision_token})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "name": "alice",
        "tenant": "vision",
        "isAdmin": False,
        "role": "member",
        "member": "alice",
    }
    set_cookies = response.headers.get_list("set-cookie")
    session = next(c for c in set_cookies if c.startswith(f"{SESSION_COOKIE}="))
    csrf = next(c for c in set_cookies if c.startswith(f"{CSRF_COOKIE}="))
    assert session.startswith(f"{SESSION_COOKIE}={members.vision_token};")
    for cookie in (session, csrf):
        assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
        assert "Path=/" in cookie
    assert "HttpOnly" in session
    assert "HttpOnly" not in csrf  # the page's script reads it
    assert len(browser.cookies[CSRF_COOKIE]) >= 32
    whoami = browser.get("/api/v1/whoami")
    assert whoami.status_code == 200, whoami.text
    assert whoami.json()["name"] == "alice"


@pytest.mark.parametrize("token", ["kbn_not-a-token", "x" * 600, ""])
def test_a_wrong_token_signs_nobody_in(browser: TestClient, token: str) -> None:
    response = browser.post("/web/session", json={"token": token})
    assert response.status_code in (401, 422)
    assert response.json()["error"]["message"]
    assert SESSION_COOKIE not in browser.cookies
    assert browser.get("/api/v1/whoami").status_code == 401


def test_a_jobs_own_token_cannot_sign_in(
    browser: TestClient, platform: Platform, api: TestClient
) -> None:
    from kiban.services.auth import create_job_token

    job = api.post("/api/v1/jobs", json=manifest("train")).json()["id"]
    with platform.sessions() as session:
        token = create_job_token(session, job_id=job, tenant="default", at=0.0)
        session.commit()
    response = browser.post("/web/session", json={"token": token})
    assert response.status_code == 401
    assert "job" in response.json()["error"]["message"]


def test_signing_out_clears_both_cookies(browser: TestClient, members: Members) -> None:
    sign_in(browser, members.vision_token)
    response = browser.delete("/web/session")
    assert response.status_code == 204
    assert SESSION_COOKIE not in browser.cookies
    assert CSRF_COOKIE not in browser.cookies
    assert browser.get("/api/v1/whoami").status_code == 401


@pytest.mark.parametrize("sent", [None, "", "wrong"], ids=["missing", "empty", "wrong"])
def test_a_change_on_the_cookie_without_the_csrf_token_is_refused(
    browser: TestClient, api: TestClient, sent: str | None
) -> None:
    sign_in(browser, (api.headers["Authorization"]).removeprefix("Bearer "))
    headers = {} if sent is None else {"X-CSRF-Token": sent}
    response = browser.post("/api/v1/jobs", json=manifest("forged"), headers=headers)
    assert response.status_code == 403, response.text
    assert "CSRF" in response.json()["error"]["message"]
    assert api.get("/api/v1/jobs", params={"name": "forged"}).json() == []


def test_a_change_on_the_cookie_with_the_csrf_token_is_made(
    browser: TestClient, api: TestClient
) -> None:
    csrf = sign_in(browser, (api.headers["Authorization"]).removeprefix("Bearer "))
    response = browser.post("/api/v1/jobs", json=manifest("mine"), headers={"X-CSRF-Token": csrf})
    assert response.status_code == 201, response.text
    assert browser.get("/api/v1/jobs").json()[0]["name"] == "mine"  # reads need no header


def test_a_bearer_token_needs_no_csrf_token(api: TestClient) -> None:
    assert api.post("/api/v1/jobs", json=manifest("script")).status_code == 201


def test_the_authorization_header_wins_over_the_cookie(
    browser: TestClient, members: Members
) -> None:
    sign_in(browser, members.vision_token)
    as_bob = browser.get(
        "/api/v1/whoami", headers={"Authorization": f"Bearer {members.speech_token}"}
    )
    assert as_bob.json()["name"] == "bob"
    wrong = browser.get("/api/v1/whoami", headers={"Authorization": "Bearer kbn_wrong"})
    assert wrong.status_code == 401  # no falling back on the cookie
    # a change with the header needs no CSRF token, though the cookie rides along
    bobs = browser.post(
        "/api/v1/jobs",
        json=manifest("bobs", queue="speech-q"),
        headers={"Authorization": f"Bearer {members.speech_token}"},
    )
    assert bobs.status_code == 201, bobs.text


def test_a_members_cookie_cannot_see_another_tenants_job(
    browser: TestClient, members: Members
) -> None:
    csrf = sign_in(browser, members.vision_token)
    assert browser.get(f"/api/v1/jobs/{members.speech_job}").status_code == 404
    cancel = browser.post(
        f"/api/v1/jobs/{members.speech_job}/cancel", headers={"X-CSRF-Token": csrf}
    )
    assert cancel.status_code == 404
    assert browser.get("/api/v1/jobs").json() == []


@pytest.mark.parametrize(
    "body", [b"", b"{}", b'{"token": 5}', b"not json", b'{"token": "x", "more": 1}']
)
def test_a_sign_in_body_that_is_not_a_token_names_the_field(
    browser: TestClient, body: bytes
) -> None:
    response = browser.post(
        "/web/session", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["problems"]
    assert SESSION_COOKIE not in browser.cookies


def test_a_huge_sign_in_body_is_refused_before_it_is_all_read(browser: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"token": "'
        for _ in range(1000):
            yield b"x" * 1024

    response = browser.post("/web/session", content=chunks())
    assert response.status_code == 413
    assert response.json()["error"]["status"] == 413
