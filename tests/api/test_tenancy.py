"""Tenants see only their own work; the admin sees everything."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.testing import FakeExecutor, manifest


@dataclass
class World:
    vision: TestClient  # alice, a member of tenant vision (queue vision-q)
    speech: TestClient  # bob, a member of tenant speech (queue speech-q)
    vision_job: str
    speech_job: str


@pytest.fixture
def world(api: TestClient, platform: Platform, executor: FakeExecutor) -> Iterator[World]:
    clients = {}
    for tenant, member in (("vision", "alice"), ("speech", "bob")):
        assert api.post("/api/v1/tenants", json={"name": tenant}).status_code == 201
        queue = {"name": f"{tenant}-q", "tenant": tenant, "quota": {"gpu": 2}}
        assert api.post("/api/v1/queues", json=queue).status_code == 201
        token = api.post(f"/api/v1/tenants/{tenant}/tokens", json={"name": member}).json()["token"]
        clients[tenant] = TestClient(
            create_app(platform), headers={"Authorization": f"Bearer {token}"}
        )
    with clients["vision"] as vision, clients["speech"] as speech:
        submitted = {}
        for tenant, client in (("vision", vision), ("speech", speech)):
            document = manifest(f"{tenant}-train", queue=f"{tenant}-q")
            response = client.post("/api/v1/jobs", json=document)
            assert response.status_code == 201, response.text
            submitted[tenant] = response.json()
            assert submitted[tenant]["tenant"] == tenant
        platform.loop.run_once()
        for tenant, job in submitted.items():
            executor.replicas[(job["id"], 1, 0)].log.extend(f"{tenant} secret\n".encode())
        yield World(vision, speech, submitted["vision"]["id"], submitted["speech"]["id"])


def ids(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["id"] if "id" in item else item["name"] for item in response.json()]


def test_member_lists_only_its_tenants_jobs(world: World) -> None:
    assert ids(world.vision.get("/api/v1/jobs")) == [world.vision_job]
    assert ids(world.speech.get("/api/v1/jobs")) == [world.speech_job]
    # Filters cannot widen the view.
    assert ids(world.vision.get("/api/v1/jobs", params={"tenant": "speech"})) == [world.vision_job]
    assert ids(world.vision.get("/api/v1/jobs", params={"queue": "speech-q"})) == []
    assert ids(world.vision.get("/api/v1/jobs", params={"name": "speech-train"})) == []
    assert ids(world.vision.get("/api/v1/jobs", params={"state": "Running"})) == [world.vision_job]


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("GET", ""), ("GET", "/events"), ("GET", "/logs"), ("POST", "/cancel")],
)
def test_other_tenants_job_is_404_as_if_it_did_not_exist(
    world: World, method: str, suffix: str
) -> None:
    hidden = world.vision.request(method, f"/api/v1/jobs/{world.speech_job}{suffix}")
    missing = world.vision.request(method, f"/api/v1/jobs/speech-train-zzzzzz{suffix}")
    assert hidden.status_code == missing.status_code == 404
    assert "secret" not in hidden.text
    # Same answer, but for the id: nothing tells a hidden job from a missing one.
    assert hidden.json()["error"]["message"].replace(world.speech_job, "ID") == (
        missing.json()["error"]["message"].replace("speech-train-zzzzzz", "ID")
    )


def test_member_cannot_cancel_another_tenants_job(world: World) -> None:
    assert world.vision.post(f"/api/v1/jobs/{world.speech_job}/cancel").status_code == 404
    assert world.speech.get(f"/api/v1/jobs/{world.speech_job}").json()["state"] == "Running"


def test_member_reads_its_own_job_events_and_logs(world: World) -> None:
    job = world.vision.get(f"/api/v1/jobs/{world.vision_job}").json()
    assert job["tenant"] == "vision" and job["state"] == "Running"
    events = world.vision.get(f"/api/v1/jobs/{world.vision_job}/events").json()
    assert [e["reason"] for e in events] == ["Submitted", "Admitted", "Started"]
    assert "alice" in events[0]["message"]
    assert world.vision.get(f"/api/v1/jobs/{world.vision_job}/logs").text == "vision secret\n"


def test_member_cannot_submit_to_another_tenants_queue(world: World, api: TestClient) -> None:
    before = api.get("/api/v1/jobs").json()
    messages = {}
    for queue in ("speech-q", "default", "no-such-q"):
        response = world.vision.post("/api/v1/jobs", json=manifest("sneaky", queue=queue))
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert [p["field"] for p in error["problems"]] == ["spec.queue"]
        messages[queue] = error["message"].replace(queue, "Q")
    # Another tenant's queue reads exactly like one that does not exist.
    assert messages["speech-q"] == messages["default"] == messages["no-such-q"]
    assert api.get("/api/v1/jobs").json() == before


def test_member_sees_only_its_queues_and_tenant(world: World) -> None:
    queues = world.vision.get("/api/v1/queues").json()
    assert [(q["name"], q["tenant"]) for q in queues] == [("vision-q", "vision")]
    assert queues[0]["running"] == 1 and queues[0]["gpusInUse"] == 1
    assert [t["name"] for t in world.vision.get("/api/v1/tenants").json()] == ["vision"]
    assert [t["name"] for t in world.speech.get("/api/v1/tenants").json()] == ["speech"]
    assert world.speech.get("/api/v1/whoami").json() == {
        "name": "bob",
        "tenant": "speech",
        "isAdmin": False,
        "jobId": None,
        "role": "member",
        "member": "bob",
    }


def test_admin_sees_everything(world: World, api: TestClient) -> None:
    assert set(ids(api.get("/api/v1/jobs"))) == {world.vision_job, world.speech_job}
    assert ids(api.get("/api/v1/jobs", params={"tenant": "speech"})) == [world.speech_job]
    assert {q["name"] for q in api.get("/api/v1/queues").json()} == {
        "default",
        "vision-q",
        "speech-q",
    }
    assert {t["name"] for t in api.get("/api/v1/tenants").json()} == {
        "default",
        "vision",
        "speech",
    }
    for job_id, tenant in ((world.vision_job, "vision"), (world.speech_job, "speech")):
        assert api.get(f"/api/v1/jobs/{job_id}").json()["tenant"] == tenant
        assert api.get(f"/api/v1/jobs/{job_id}/logs").text == f"{tenant} secret\n"
        assert len(api.get(f"/api/v1/jobs/{job_id}/events").json()) == 3


def test_admin_may_submit_to_any_tenants_queue(world: World, api: TestClient) -> None:
    response = api.post("/api/v1/jobs", json=manifest("on-behalf", queue="speech-q"))
    assert response.status_code == 201
    assert response.json()["tenant"] == "speech"
    assert response.json()["id"] in ids(world.speech.get("/api/v1/jobs"))
    assert response.json()["id"] not in ids(world.vision.get("/api/v1/jobs"))
