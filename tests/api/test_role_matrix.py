"""The role matrix (issue 27): every role x every API endpoint, allowed or denied, as a table.

Each endpoint of the app has an entry (an endpoint added without one fails
``test_every_endpoint_has_an_entry``): a request to make and the roles that may make it. A role
denied gets 403 in the API's error shape, naming the role the endpoint needs and what the token
is (a job's token beyond its job: naming the job); a role allowed gets past the role check (its
answer is the endpoint's own: 200, or 404/409/422 for the harmless targets used here).

Roles: ``admin``; ``tenant-admin``, ``member`` (alice) and ``viewer`` of vision; ``job``: the
token of alice's running job ``{JOB}``, whose requests below name that job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.domain.roles import Role
from kiban.executors.base import NodeInfo
from kiban.platform import build_platform
from kiban.services.auth import create_job_token
from kiban.testing import FakeExecutor, ManualClock, manifest

POLICY = {
    "queues": [
        {"name": "default"},
        {"name": "vision-q", "tenant": "vision", "quota": {"gpu": 2}},
        {"name": "speech-q", "tenant": "speech", "quota": {"gpu": 2}},
    ],
}
A, T, M, V, J = Role.ADMIN, Role.TENANT_ADMIN, Role.MEMBER, Role.VIEWER, Role.JOB
EVERYONE = frozenset({A, T, M, V, J})
READERS = frozenset({A, T, M, V})  # a job's token reads only its own job
SUBMITTERS = frozenset({A, T, M})
MANAGERS = frozenset({A, T})
ADMINS = frozenset({A})


@dataclass(frozen=True)
class Entry:
    """The request for one endpoint, and the roles allowed to make it."""

    path: str  # with {JOB}: alice's running job (the job token's own)
    allowed: frozenset[Role]
    body: Any = None
    params: dict[str, Any] | None = None


GONE = "nothing-here"
SERVICE = {
    "apiVersion": "kiban/v1",
    "kind": "Service",
    "metadata": {"name": "svc"},
    "spec": {"queue": "vision-q", "model": {"name": "m", "storageUri": "file:///m"}},
}

MATRIX: dict[tuple[str, str], Entry] = {
    # jobs and arrays
    ("POST", "/api/v1/jobs"): Entry("/api/v1/jobs", SUBMITTERS, body={"kind": "nonsense"}),
    ("GET", "/api/v1/jobs"): Entry("/api/v1/jobs", READERS),
    ("GET", "/api/v1/jobs/{job_id}"): Entry("/api/v1/jobs/{JOB}", EVERYONE),
    ("POST", "/api/v1/jobs/{job_id}/cancel"): Entry(f"/api/v1/jobs/{GONE}/cancel", SUBMITTERS),
    ("POST", "/api/v1/jobs/{job_id}/checkpoint"): Entry(
        "/api/v1/jobs/{JOB}/checkpoint", SUBMITTERS | {J}
    ),
    ("GET", "/api/v1/jobs/{job_id}/events"): Entry("/api/v1/jobs/{JOB}/events", EVERYONE),
    ("GET", "/api/v1/jobs/{job_id}/logs"): Entry("/api/v1/jobs/{JOB}/logs", EVERYONE),
    ("GET", "/api/v1/arrays"): Entry("/api/v1/arrays", READERS),
    ("GET", "/api/v1/arrays/{array_id}"): Entry(f"/api/v1/arrays/{GONE}", READERS),
    ("POST", "/api/v1/arrays/{array_id}/cancel"): Entry(
        f"/api/v1/arrays/{GONE}/cancel", SUBMITTERS
    ),
    # services and notebooks
    ("POST", "/api/v1/services"): Entry("/api/v1/services", SUBMITTERS, body={"kind": "x"}),
    ("GET", "/api/v1/services"): Entry("/api/v1/services", READERS),
    ("GET", "/api/v1/services/{name}"): Entry(f"/api/v1/services/{GONE}", READERS),
    ("POST", "/api/v1/services/{name}/promote"): Entry(
        f"/api/v1/services/{GONE}/promote", SUBMITTERS
    ),
    ("POST", "/api/v1/services/{name}/rollback"): Entry(
        f"/api/v1/services/{GONE}/rollback", SUBMITTERS
    ),
    ("DELETE", "/api/v1/services/{name}"): Entry(f"/api/v1/services/{GONE}", SUBMITTERS),
    ("GET", "/api/v1/services/{name}/events"): Entry(f"/api/v1/services/{GONE}/events", READERS),
    ("POST", "/api/v1/services/{name}/openai/{path:path}"): Entry(
        f"/api/v1/services/{GONE}/openai/v1/models", SUBMITTERS
    ),
    ("POST", "/api/v1/notebooks"): Entry("/api/v1/notebooks", SUBMITTERS, body={"name": 5}),
    ("GET", "/api/v1/notebooks"): Entry("/api/v1/notebooks", READERS),
    ("GET", "/api/v1/notebooks/{name}"): Entry(f"/api/v1/notebooks/{GONE}", READERS),
    ("POST", "/api/v1/notebooks/{name}/stop"): Entry(f"/api/v1/notebooks/{GONE}/stop", SUBMITTERS),
    # the caller's view
    ("GET", "/api/v1/whoami"): Entry("/api/v1/whoami", EVERYONE),
    ("GET", "/api/v1/overview"): Entry("/api/v1/overview", READERS),
    ("GET", "/api/v1/usage/history"): Entry("/api/v1/usage/history", READERS),
    ("GET", "/api/v1/queues"): Entry("/api/v1/queues", READERS),
    ("GET", "/api/v1/tenants"): Entry("/api/v1/tenants", READERS),
    ("GET", "/api/v1/policy"): Entry("/api/v1/policy", READERS),
    ("GET", "/api/v1/nodes"): Entry("/api/v1/nodes", READERS),
    ("GET", "/api/v1/nodes/{name}/health"): Entry("/api/v1/nodes/node-0/health", READERS),
    ("GET", "/api/v1/usage"): Entry("/api/v1/usage", READERS),
    ("GET", "/api/v1/share"): Entry("/api/v1/share", READERS),
    ("GET", "/api/v1/budgets"): Entry("/api/v1/budgets", READERS),
    ("GET", "/api/v1/budgets/extensions"): Entry("/api/v1/budgets/extensions", READERS),
    # a tenant's own administration
    ("POST", "/api/v1/queues"): Entry(  # their tenant's, within its ceiling (a bad name: 422)
        "/api/v1/queues",
        MANAGERS,
        body={"name": "Bad Name", "tenant": "vision", "quota": {"gpu": 1}},
    ),
    ("PATCH", "/api/v1/queues/{name}"): Entry(
        "/api/v1/queues/vision-q", MANAGERS, body={"strategy": "BestEffortFIFO"}
    ),
    ("DELETE", "/api/v1/queues/{name}"): Entry(f"/api/v1/queues/{GONE}", MANAGERS),
    ("POST", "/api/v1/tenants/{tenant}/tokens"): Entry(
        "/api/v1/tenants/vision/tokens", MANAGERS, body={"name": "newcomer", "role": "viewer"}
    ),
    ("GET", "/api/v1/tokens"): Entry("/api/v1/tokens", MANAGERS),
    ("DELETE", "/api/v1/tokens/{token_id}"): Entry("/api/v1/tokens/999999", MANAGERS),
    # the cluster's
    ("POST", "/api/v1/tenants"): Entry("/api/v1/tenants", ADMINS, body={"name": "Bad Name"}),
    ("DELETE", "/api/v1/tenants/{tenant}"): Entry(f"/api/v1/tenants/{GONE}", ADMINS),
    ("PUT", "/api/v1/policy"): Entry("/api/v1/policy", ADMINS, body={"queues": "nonsense"}),
    ("GET", "/api/v1/policy/versions"): Entry("/api/v1/policy/versions", ADMINS),
    ("POST", "/api/v1/nodes/{name}/cordon"): Entry(f"/api/v1/nodes/{GONE}/cordon", ADMINS),
    ("POST", "/api/v1/nodes/{name}/uncordon"): Entry(f"/api/v1/nodes/{GONE}/uncordon", ADMINS),
    ("POST", "/api/v1/nodes/{name}/health"): Entry(
        f"/api/v1/nodes/{GONE}/health", ADMINS, body={"nonsense": 1}
    ),
    ("POST", "/api/v1/nodes/health"): Entry(
        "/api/v1/nodes/health", ADMINS, body={"reports": [{"nonsense": 1}]}
    ),
    ("POST", "/api/v1/nodes/{name}/health/check"): Entry(
        f"/api/v1/nodes/{GONE}/health/check", ADMINS
    ),
    ("POST", "/api/v1/health/sweeps"): Entry("/api/v1/health/sweeps", ADMINS, body={"sizeMb": -1}),
    ("GET", "/api/v1/health/sweeps"): Entry("/api/v1/health/sweeps", ADMINS),
    ("POST", "/api/v1/budgets/extensions"): Entry(
        "/api/v1/budgets/extensions", ADMINS, body={"tenant": GONE, "gpuHours": -1}
    ),
    ("GET", "/api/v1/audit"): Entry("/api/v1/audit", ADMINS),
    ("GET", "/api/v1/audit/verify"): Entry("/api/v1/audit/verify", ADMINS),
    ("GET", "/api/v1/audit/anchor"): Entry("/api/v1/audit/anchor", ADMINS),
}
OPEN = {
    ("GET", "/healthz"),
    ("HEAD", "/healthz"),
    ("GET", "/metrics"),
    ("GET", "/api/v1/discovery/prometheus"),
}
"""Endpoints without a token: the health check and Prometheus' scrape and discovery."""


def api_routes(app: FastAPI) -> set[tuple[str, str]]:
    """Every (method, path) of the app's API routes, the included routers' too."""
    found: set[tuple[str, str]] = set()

    def walk(routes: list[Any]) -> None:
        for route in routes:
            inner = getattr(route, "original_router", None)
            if inner is not None:
                walk(inner.routes)
            elif isinstance(route, APIRoute):
                found.update((method, route.path) for method in route.methods)

    walk(app.router.routes)
    return {(m, p) for m, p in found if p.startswith("/api/") or p in ("/healthz", "/metrics")}


@dataclass
class Callers:
    clients: dict[Role, TestClient]
    job: str


@pytest.fixture(scope="module")
def callers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callers]:
    tmp = tmp_path_factory.mktemp("roles")
    clock = ManualClock()
    nodes = [
        NodeInfo(f"node-{i}", gpus=2, cpu_millis=8000, memory=2**35, labels={}) for i in (0, 1)
    ]
    executor = FakeExecutor(nodes, clock=clock)
    platform = build_platform(
        home=tmp / "home", db_url=f"sqlite:///{tmp / 'kiban.db'}", executor=executor, clock=clock
    )
    app = create_app(platform)
    admin_token = (platform.home / "token").read_text().strip()

    def client(token: str) -> TestClient:
        return TestClient(app, headers={"Authorization": f"Bearer {token}"})

    with client(admin_token) as admin:
        for name in ("vision", "speech"):
            assert admin.post("/api/v1/tenants", json={"name": name}).status_code == 201
        assert admin.put("/api/v1/policy", json=POLICY).status_code == 200
        tokens = {Role.ADMIN: admin_token}
        for role, member in ((T, "tina"), (M, "alice"), (V, "vic")):
            answer = admin.post(
                "/api/v1/tenants/vision/tokens", json={"name": member, "role": role.value}
            )
            assert answer.status_code == 201, answer.text
            tokens[role] = answer.json()["token"]
        with client(tokens[M]) as alice:
            answer = alice.post("/api/v1/jobs", json=manifest("train", queue="vision-q"))
            assert answer.status_code == 201, answer.text
            job = answer.json()["id"]
        platform.loop.run_once()
        with platform.sessions() as session:
            tokens[J] = create_job_token(session, job_id=job, tenant="vision", at=clock.now())
            session.commit()
        clients = {role: client(token) for role, token in tokens.items()}
        try:
            yield Callers(clients, job)
        finally:
            for each in clients.values():
                each.close()
    platform.close()


def test_every_endpoint_has_an_entry() -> None:
    app = create_app(build_platform_stub())
    routes = api_routes(app)
    missing = sorted(routes - set(MATRIX) - OPEN)
    assert not missing, f"endpoints without an entry in the role matrix: {missing}"
    stale = sorted(set(MATRIX) - routes)
    assert not stale, f"entries for endpoints that are gone: {stale}"


def build_platform_stub() -> Any:
    """A stand-in platform: building the app only reads its routes."""

    class Stub:
        pass

    return Stub()


CASES = [
    pytest.param(role, key, id=f"{role.value} {key[0]} {key[1]}")
    for key in MATRIX
    for role in (A, T, M, V, J)
]


@pytest.mark.parametrize(("role", "key"), CASES)
def test_role_matrix(callers: Callers, role: Role, key: tuple[str, str]) -> None:
    entry = MATRIX[key]
    method = key[0]
    answer = callers.clients[role].request(
        method,
        entry.path.replace("{JOB}", callers.job),
        json=entry.body,
        params=entry.params,
    )
    if role in entry.allowed:
        assert answer.status_code not in (401, 403), answer.text
        return
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["status"] == 403 and error["problems"] == []
    if role is J:
        assert f"this is job {callers.job}'s token" in error["message"]
    else:
        needed = min(entry.allowed - {J}, key=lambda r: len(ROLE_ORDER) - ROLE_ORDER.index(r))
        assert f"needs the {needed.value} role" in error["message"]
        assert f"this token is {role.value} " in error["message"]


ROLE_ORDER = [A, T, M, V]
"""From the most to the least: a refusal names the least role that may."""
