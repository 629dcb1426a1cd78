"""The dashboard's reads: the overview's GPU counts, and usage history that adds up to the GPU
time replicas ran."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.services.nodes import set_node_health
from kiban.testing import FakeExecutor, ManualClock, manifest


def submit(api: TestClient, name: str, gpu: int, queue: str | None = None) -> str:
    response = api.post("/api/v1/jobs", json=manifest(name, gpu=gpu, queue=queue))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def member(api: TestClient, platform: Platform, tenant: str, name: str) -> TestClient:
    """A client of a new member of a new tenant with a queue of 2 GPUs (``<tenant>-q``)."""
    assert api.post("/api/v1/tenants", json={"name": tenant}).status_code == 201
    queue = {"name": f"{tenant}-q", "tenant": tenant, "quota": {"gpu": 2}}
    assert api.post("/api/v1/queues", json=queue).status_code == 201
    token = api.post(f"/api/v1/tenants/{tenant}/tokens", json={"name": name}).json()["token"]
    return TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"})


def test_overview_counts_gpus_per_flavor_queues_and_waiting_reasons(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    # three nodes of two GPUs; two jobs of two GPUs run, one waits; one idle node turns sick
    running = [submit(api, "a", 2), submit(api, "b", 2)]
    platform.loop.run_once()
    submit(api, "c", 2)
    held = {r["node"] for j in running for r in api.get(f"/api/v1/jobs/{j}").json()["replicas"]}
    idle = ({"node-0", "node-1", "node-2"} - held).pop()
    with platform.sessions() as session:
        set_node_health(session, idle, False, "gpu fell off the bus", clock.now())
        session.commit()
    platform.loop.run_once()
    seen = api.get("/api/v1/overview")
    assert seen.status_code == 200, seen.text
    body = seen.json()
    assert body["at"] == clock.now()
    [flavor] = body["flavors"]
    assert flavor | {"flavor": None} == {
        "flavor": None,
        "total": 6,
        "free": 0,
        "used": 4,
        "borrowed": 0,
        "unhealthy": 2,
    }
    assert sum(r["count"] for r in body["pendingByReason"]) == 1
    waiting = [j for j in api.get("/api/v1/jobs").json() if j["state"] == "Pending"]
    assert [r["reason"] for r in body["pendingByReason"]] == [waiting[0]["reason"]["code"]]
    [default] = [q for q in body["queues"] if q["name"] == "default"]
    assert default["flavors"][flavor["flavor"]]["used"] == 4


def test_a_member_sees_cluster_gpus_but_only_its_own_queues_tenant_and_waiting_jobs(
    api: TestClient, platform: Platform
) -> None:
    for name in ("a", "b", "c", "waits"):
        submit(api, name, 2)
    platform.loop.run_once()
    with member(api, platform, "vision", "alice") as alice:
        body = alice.get("/api/v1/overview").json()
    assert [q["name"] for q in body["queues"]] == ["vision-q"]
    assert body["queues"][0]["flavors"][body["flavors"][0]["flavor"]]["nominal"] == 2
    assert [t["name"] for t in body["tenants"]] == ["vision"]
    assert body["pendingByReason"] == []  # the waiting job is the default tenant's
    assert body["flavors"][0]["used"] == 6  # flavors are cluster facts


def test_usage_history_adds_up_to_the_gpu_time_replicas_ran(
    api: TestClient, platform: Platform, clock: ManualClock, executor: FakeExecutor
) -> None:
    done = submit(api, "done", 2)
    platform.loop.run_once()
    platform.loop.run_once()  # launched
    clock.advance(1000)
    still = submit(api, "still", 1)
    platform.loop.run_once()
    platform.loop.run_once()
    clock.advance(800)
    executor.finish_all(done)
    platform.loop.run_once()  # "done" ends after 1800 s of 2 GPUs
    assert api.get(f"/api/v1/jobs/{done}").json()["state"] == "Succeeded"
    clock.advance(700)  # "still" has held 1 GPU for 1500 s
    assert api.get(f"/api/v1/jobs/{still}").json()["state"] == "Running"
    history = api.get("/api/v1/usage/history", params={"hours": 2, "step": 600})
    assert history.status_code == 200, history.text
    body = history.json()
    assert body["step"] == 600
    [default] = [t for t in body["tenants"] if t["tenant"] == "default"]
    assert len(default["points"]) == 12
    assert default["points"][-1]["at"] == clock.now()
    total = sum(p["gpuHours"] for p in default["points"])
    assert total == pytest.approx((2 * 1800 + 1 * 1500) / 3600)
    decayed = [p["decayedGpuHours"] for p in default["points"]]
    assert decayed[-1] <= total  # decay only takes away
    assert decayed[-1] == pytest.approx(total, rel=0.01)  # within minutes of a day's half-life


def test_a_members_usage_history_is_its_own_tenants(api: TestClient, platform: Platform) -> None:
    submit(api, "other", 1)
    platform.loop.run_once()
    with member(api, platform, "vision", "alice") as alice:
        body = alice.get("/api/v1/usage/history", params={"hours": 1, "step": 600}).json()
    assert [t["tenant"] for t in body["tenants"]] == ["vision"]


@pytest.mark.parametrize(
    ("params", "field"),
    [({"hours": 0}, "hours"), ({"step": 10}, "step"), ({"hours": 10_000}, "hours")],
)
def test_a_bad_window_names_the_field(api: TestClient, params: dict[str, int], field: str) -> None:
    response = api.get("/api/v1/usage/history", params=params)
    assert response.status_code == 422, response.text
    assert any(field in p["field"] for p in response.json()["error"]["problems"])


def test_a_window_of_too_many_points_takes_a_longer_step(api: TestClient) -> None:
    response = api.get("/api/v1/usage/history", params={"hours": 100, "step": 60})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["step"] == 180  # 100 hours in 2000 points
    assert {len(t["points"]) for t in body["tenants"]} == {2000}
