"""``GET /api/v1/usage``: a member reads their tenant's usage, the admin every tenant's; bad
input is a 422 naming the field."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.store.models_accounting import UsageRecord
from kiban.testing import ManualClock

HOUR = 3600.0


def record(job: str, tenant: str, member: str, start: float, end: float | None, **kw: object):
    values: dict[str, object] = {
        "kind": "job",
        "job_id": job,
        "attempt": 1,
        "tenant": tenant,
        "member": member,
        "queue": f"{tenant}-q",
        "flavor": "h100",
        "gpus": 2,
        "cpu_millis": 4000,
        "memory": 2**30,
        "started_at": start,
        "ended_at": end,
        "gpu_seconds": None if end is None else 2 * (end - start),
        "outcome": None if end is None else "succeeded",
    }
    values.update(kw)
    return UsageRecord(**values)


@pytest.fixture
def vision(api: TestClient, platform: Platform, clock: ManualClock) -> Iterator[TestClient]:
    """alice's client (a member of tenant vision), with a day of records stored."""
    now = clock.now()
    assert api.post("/api/v1/tenants", json={"name": "vision"}).status_code == 201
    token = api.post("/api/v1/tenants/vision/tokens", json={"name": "alice"}).json()["token"]
    with platform.sessions() as session:
        session.add_all(
            [
                record("v1", "vision", "alice", now - 10 * HOUR, now - 8 * HOUR),
                record(
                    "v2", "vision", "carol", now - 5 * HOUR, now - 4 * HOUR, outcome="preempted"
                ),
                record("v3", "vision", "alice", now - HOUR, None),  # still running
                record("s1", "speech", "bob", now - 3 * HOUR, now - 2 * HOUR, outcome="node-lost"),
                record("old", "vision", "alice", now - 40 * 24 * HOUR, now - 39 * 24 * HOUR),
            ]
        )
        session.commit()
    with TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def test_a_member_reads_their_tenants_usage_per_user(vision: TestClient) -> None:
    response = vision.get("/api/v1/usage", params={"by": "user", "since": "1d"})
    assert response.status_code == 200, response.text
    rows = {(r["tenant"], r["key"]): r for r in response.json()["rows"]}
    assert set(rows) == {("vision", "alice"), ("vision", "carol")}  # not speech's bob
    assert rows["vision", "alice"]["gpuHours"] == pytest.approx(2 * 2 + 2 * 1)
    assert rows["vision", "alice"]["cpuHours"] == pytest.approx(4 * 2 + 4 * 1)
    assert (rows["vision", "alice"]["attempts"], rows["vision", "alice"]["jobs"]) == (2, 2)
    assert rows["vision", "carol"]["preemptedGpuHours"] == pytest.approx(2.0)
    assert rows["vision", "carol"]["cost"] is None  # no prices in the policy


def test_the_admin_reads_every_tenant(api: TestClient, vision: TestClient) -> None:
    del vision
    response = api.get("/api/v1/usage", params={"since": "1d"})
    rows = {r["key"]: r for r in response.json()["rows"]}
    assert set(rows) == {"vision", "speech"}
    assert rows["speech"]["nodeLostGpuHours"] == pytest.approx(2.0)
    assert rows["vision"]["gpuHours"] == pytest.approx(4 + 2 + 2)
    # A window reaching 40 days back finds the old record too.
    wider = api.get("/api/v1/usage", params={"since": "45d", "by": "job"}).json()["rows"]
    assert "old" in {r["key"] for r in wider}


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"by": "colour"}, "by", "unknown grouping"),
        ({"since": "yesterday"}, "since", "neither a duration"),
        ({"until": "3x"}, "until", "neither a duration"),
        ({"since": "1d", "until": "2d"}, "until", "after since"),
        ({"granularity": "hour"}, "granularity", "unknown granularity"),
        ({"since": "3000d", "granularity": "day"}, "granularity", "more than"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(
    api: TestClient, params: dict[str, str], field: str, words: str
) -> None:
    response = api.get("/api/v1/usage", params=params)
    assert response.status_code == 422, response.text
    problems = response.json()["error"]["problems"]
    assert [p["field"] for p in problems] == [field]
    assert words in problems[0]["message"]


def test_with_prices_in_the_policy_usage_has_a_cost(
    api: TestClient, vision: TestClient, platform: Platform
) -> None:
    """The policy's prices per GPU-hour and CPU-hour of a flavor cost each row: alice held
    2 GPUs and 4 CPUs of h100 for 3 hours in the day (2 of them ended, 1 still running)."""
    policy = {
        "flavors": [{"name": "h100", "nodeLabels": {}}],  # every node
        "queues": [{"name": "vision-q", "tenant": "vision"}],
        "prices": [{"flavor": "h100", "gpuHour": 2.5, "cpuHour": 0.02}],
    }
    applied = api.put("/api/v1/policy", json=policy)
    assert applied.status_code == 200, applied.text
    response = vision.get("/api/v1/usage", params={"by": "user", "since": "1d"})
    assert response.status_code == 200, response.text
    rows = {r["key"]: r for r in response.json()["rows"]}
    assert rows["alice"]["cost"] == pytest.approx(2.5 * 6 + 0.02 * 12)
    assert rows["carol"]["cost"] == pytest.approx(2.5 * 2 + 0.02 * 4)
