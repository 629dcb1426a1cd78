"""Bearer tokens: who gets in, who may do what, and how the admin token is kept."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from kiban.api.app import create_app
from kiban.platform import Platform, build_platform
from kiban.services.auth import hash_token
from kiban.store.models import ApiToken, Job, Queue, Tenant
from kiban.testing import FakeExecutor, ManualClock

JOB = {
    "apiVersion": "kiban/v1",
    "kind": "Job",
    "metadata": {"name": "train"},
    "spec": {"tasks": [{"replicas": 1, "resources": {"gpu": 1}, "command": ["python", "t.py"]}]},
}

# Every route under /api/v1, with a body that would be accepted from an admin.
ENDPOINTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/api/v1/whoami", None),
    ("GET", "/api/v1/jobs", None),
    ("POST", "/api/v1/jobs", JOB),
    ("GET", "/api/v1/jobs/train-abcdef", None),
    ("POST", "/api/v1/jobs/train-abcdef/cancel", None),
    ("GET", "/api/v1/jobs/train-abcdef/events", None),
    ("GET", "/api/v1/jobs/train-abcdef/logs", None),
    ("GET", "/api/v1/queues", None),
    ("POST", "/api/v1/queues", {"name": "extra", "tenant": "default", "quota": {"gpu": 2}}),
    ("GET", "/api/v1/nodes", None),
    ("POST", "/api/v1/nodes/node-0/cordon", None),
    ("POST", "/api/v1/nodes/node-0/uncordon", None),
    ("GET", "/api/v1/policy", None),
    ("PUT", "/api/v1/policy", {"queues": [{"name": "default"}, {"name": "extra"}]}),
    ("GET", "/api/v1/policy/versions", None),
    ("GET", "/api/v1/tenants", None),
    ("POST", "/api/v1/tenants", {"name": "intruders"}),
    ("POST", "/api/v1/tenants/default/tokens", {"name": "mallory"}),
]


def assert_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is a JSON error body of ``status``; returns its ``error`` object."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert error["status"] == status
    assert error["message"]
    assert isinstance(error["problems"], list)
    return error


@pytest.fixture
def anonymous(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform)) as client:
        yield client


def counts(platform: Platform) -> dict[str, int]:
    with platform.sessions() as session:
        return {
            model.__tablename__: session.scalar(select(func.count()).select_from(model)) or 0
            for model in (Job, Queue, Tenant, ApiToken)
        }


def make_member(api: TestClient, platform: Platform, tenant: str, name: str) -> TestClient:
    assert api.post("/api/v1/tenants", json={"name": tenant}).status_code in (201, 409)
    created = api.post(f"/api/v1/tenants/{tenant}/tokens", json={"name": name})
    assert created.status_code == 201, created.text
    token = created.json()["token"]
    return TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize(
    ("authorization", "message_part"),
    [
        (None, "missing token"),
        ("", "missing token"),
        ("Basic YWRtaW46YWRtaW4=", "malformed"),
        ("Bearer", "malformed"),
        ("Bearer    ", "malformed"),
        ("Token kbn_abc", "malformed"),
        ("Bearer kbn_not-a-real-token", "invalid token"),
    ],
    ids=["absent", "empty", "basic", "no-token", "blank-token", "other-scheme", "unknown-token"],
)
def test_requests_without_a_valid_token_get_401_and_change_nothing(
    anonymous: TestClient, platform: Platform, authorization: str | None, message_part: str
) -> None:
    before = counts(platform)
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path, body in ENDPOINTS:
        response = anonymous.request(method, path, json=body, headers=headers)
        error = assert_error(response, 401)
        assert message_part in error["message"], (method, path, error)
        assert response.headers["www-authenticate"] == "Bearer", (method, path)
    assert counts(platform) == before


def test_a_wrong_admin_token_is_refused(anonymous: TestClient, admin_token: str) -> None:
    almost = admin_token[:-1] + ("A" if admin_token[-1] != "A" else "B")
    response = anonymous.get("/api/v1/whoami", headers={"Authorization": f"Bearer {almost}"})
    assert_error(response, 401)


def test_unauthenticated_request_is_refused_before_its_body_is_looked_at(
    anonymous: TestClient,
) -> None:
    # A body that would fail validation must not turn a 401 into a 422 (which would tell an
    # anonymous caller what the endpoint accepts).
    response = anonymous.post("/api/v1/queues", json={"bogus": True})
    assert_error(response, 401)
    response = anonymous.post(
        "/api/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert_error(response, 401)


def test_the_scheme_is_case_insensitive(anonymous: TestClient, admin_token: str) -> None:
    response = anonymous.get("/api/v1/whoami", headers={"Authorization": f"bearer {admin_token}"})
    assert response.status_code == 200
    assert response.json() == {
        "name": "admin",
        "tenant": None,
        "isAdmin": True,
        "jobId": None,
        "role": "admin",
        "member": "admin",
    }


def test_member_gets_403_from_admin_endpoints_and_nothing_is_created(
    api: TestClient, platform: Platform
) -> None:
    with make_member(api, platform, "vision", "alice") as alice:
        whoami = alice.get("/api/v1/whoami")
        assert whoami.json() == {
            "name": "alice",
            "tenant": "vision",
            "isAdmin": False,
            "jobId": None,
            "role": "member",
            "member": "alice",
        }
        before = counts(platform)
        attempts = [
            ("/api/v1/tenants", {"name": "intruders"}),
            ("/api/v1/queues", {"name": "grab", "tenant": "vision", "quota": {"gpu": 6}}),
            ("/api/v1/queues", {"name": "grab", "tenant": "default"}),
            ("/api/v1/tenants/vision/tokens", {"name": "bob"}),
            ("/api/v1/tenants/default/tokens", {"name": "mallory"}),
        ]
        for path, body in attempts:
            error = assert_error(alice.post(path, json=body), 403)
            assert "admin" in error["message"]
        assert counts(platform) == before
    queues = {q["name"] for q in api.get("/api/v1/queues").json()}
    assert "grab" not in queues
    assert "intruders" not in {t["name"] for t in api.get("/api/v1/tenants").json()}


def test_admin_token_file_is_private(platform: Platform, admin_token: str) -> None:
    token_file = platform.home / "token"
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    assert admin_token.startswith("kbn_")
    assert len(admin_token) > 40  # 256 random bits, URL-safe


def test_tokens_are_stored_only_as_sha256_hashes(
    api: TestClient, platform: Platform, admin_token: str
) -> None:
    api.post("/api/v1/tenants", json={"name": "vision"})
    member_token = api.post("/api/v1/tenants/vision/tokens", json={"name": "alice"}).json()["token"]
    with platform.engine.connect() as connection:
        rows = [dict(r._mapping) for r in connection.execute(text("SELECT * FROM api_tokens"))]
    assert len(rows) == 2
    by_role = {r["role"]: r for r in rows}
    assert by_role["admin"]["token_hash"] == hash_token(admin_token)
    assert by_role["admin"]["tenant"] is None
    assert by_role["member"]["token_hash"] == hash_token(member_token)
    assert by_role["member"]["tenant"] == "vision"
    for row in rows:
        for value in row.values():
            for token in (admin_token, member_token):
                assert token not in str(value)
                assert token.removeprefix("kbn_") not in str(value)


def test_second_start_on_the_same_home_keeps_the_admin_token(
    platform: Platform,
    admin_token: str,
    db_url: str,
    executor: FakeExecutor,
    clock: ManualClock,
) -> None:
    token_file: Path = platform.home / "token"
    again = build_platform(home=platform.home, db_url=db_url, executor=executor, clock=clock)
    try:
        assert again.admin_token is None
        assert token_file.read_text().strip() == admin_token
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        with again.sessions() as session:
            admins = session.scalars(select(ApiToken).where(ApiToken.role == "admin")).all()
        assert [a.token_hash for a in admins] == [hash_token(admin_token)]
        headers = {"Authorization": f"Bearer {admin_token}"}
        with TestClient(create_app(again), headers=headers) as client:
            assert client.get("/api/v1/whoami").json()["isAdmin"] is True
    finally:
        again.engine.dispose()
