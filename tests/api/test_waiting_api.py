"""What the API says about waiting and preempted jobs, queues and standings, per tenant.

The state comes from real scheduling passes over the fake executor (3 nodes x 2 GPUs).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban import testing
from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.testing import ManualClock, submit

HOUR = 3600.0


# These tests' jobs take 2 GPUs unless they say otherwise.
manifest = partial(testing.manifest, gpu=2)


def get(client: TestClient, path: str) -> Any:
    response = client.get(path)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_waiting_job_shows_positions_forecast_and_standing(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    # all 6 GPUs, for an hour
    big = submit(api, manifest("big", replicas=3, maxRuntime="1h"))["id"]
    platform.loop.run_once()
    platform.loop.run_once()  # usage counts from the first pass that sees it running
    clock.advance(HOUR / 2)
    first = submit(api, manifest("first"))["id"]
    clock.advance(1)
    second = submit(api, manifest("second", gpu=1))["id"]
    platform.loop.run_once()

    jobs = {j["name"]: j for j in get(api, "/api/v1/jobs")}
    running, waiting = jobs["big"], jobs["first"]
    assert running["state"] == "Running"
    assert (running["eta"], running["clusterPosition"], running["queuePosition"]) == (None,) * 3
    assert waiting["state"] == "Pending"
    assert waiting["reason"]["code"] == "WaitingForReservation"
    assert (waiting["queuePosition"], waiting["clusterPosition"]) == (1, 1)
    assert (jobs["second"]["queuePosition"], jobs["second"]["clusterPosition"]) == (2, 2)
    # big ends at its maxRuntime, half an hour from now: then both start.
    assert waiting["eta"] == pytest.approx(clock.now() - 1 + HOUR / 2, abs=2)
    assert jobs["second"]["eta"] == pytest.approx(waiting["eta"], abs=2)
    # The tenant held 6 GPUs for half an hour (decay aside): about 3 GPU-hours, weight 1.
    standing = waiting["standing"]
    assert 2.9 * HOUR < standing < 3 * HOUR
    assert {j["standing"] for j in jobs.values()} == {standing}
    assert (waiting["preemptedBy"], waiting["lastCheckpointAt"]) == (None, None)

    one = get(api, f"/api/v1/jobs/{first}")  # the detail view says the same
    assert {k: one[k] for k in ("eta", "clusterPosition", "queuePosition", "standing")} == {
        k: waiting[k] for k in ("eta", "clusterPosition", "queuePosition", "standing")
    }
    assert get(api, f"/api/v1/jobs/{big}")["eta"] is None
    assert get(api, f"/api/v1/jobs/{second}")["clusterPosition"] == 2


def test_a_preempted_job_names_its_preemptor(api: TestClient, platform: Platform) -> None:
    low = submit(api, manifest("low", replicas=3, priorityClass="low"))["id"]
    platform.loop.run_once()
    high = submit(api, manifest("urgent", priorityClass="high"))["id"]
    platform.loop.run_once()  # preempts low
    platform.loop.run_once()  # low's replicas stopped: back in its queue
    victim = get(api, f"/api/v1/jobs/{low}")
    assert victim["preemptedBy"] == high
    assert (victim["state"], victim["attempt"]) == ("Pending", 2)
    assert get(api, f"/api/v1/jobs/{high}")["state"] == "Running"
    events = [e["message"] for e in get(api, f"/api/v1/jobs/{low}/events")]
    assert any(high in message for message in events)


@dataclass
class Tenants:
    vision: TestClient
    speech: TestClient


@pytest.fixture
def tenants(api: TestClient, platform: Platform) -> Iterator[Tenants]:
    """Two tenants in one cohort: vision (4 GPUs nominal) and speech (2), weights 1 and 2."""
    policy = {
        "cohorts": [{"name": "research"}],
        "queues": [
            {"name": "default", "quota": {"gpu": 0}},
            {"name": "vision", "tenant": "vision", "cohort": "research", "quota": {"gpu": 4}},
            {
                "name": "speech",
                "tenant": "speech",
                "cohort": "research",
                "quota": {"gpu": 2},
                "fairShareWeight": 2,
            },
        ],
    }
    assert api.put("/api/v1/policy", json=policy).status_code == 200
    clients = {}
    for tenant in ("vision", "speech"):
        token = api.post(f"/api/v1/tenants/{tenant}/tokens", json={"name": tenant}).json()["token"]
        clients[tenant] = TestClient(
            create_app(platform), headers={"Authorization": f"Bearer {token}"}
        )
    with clients["vision"] as vision, clients["speech"] as speech:
        yield Tenants(vision, speech)


def test_a_tenant_sees_its_own_standing_and_queue_but_not_anothers(
    tenants: Tenants, platform: Platform, clock: ManualClock
) -> None:
    submit(tenants.speech, manifest("wide", queue="speech", replicas=2))  # 4 GPUs: borrows 2
    platform.loop.run_once()
    platform.loop.run_once()
    clock.advance(HOUR)
    platform.loop.run_once()  # an hour of usage accrues
    hidden = submit(tenants.speech, manifest("later", queue="speech"))["id"]
    mine = submit(tenants.vision, manifest("mine", queue="vision", gpu=1))["id"]
    platform.loop.run_once()

    seen = get(tenants.vision, "/api/v1/jobs")
    assert [j["id"] for j in seen] == [mine]
    assert seen[0]["standing"] == 0.0  # vision has used nothing yet
    assert tenants.vision.get(f"/api/v1/jobs/{hidden}").status_code == 404
    speech_jobs = get(tenants.speech, "/api/v1/jobs")
    # 4 GPUs for an hour, decayed over a 7-day half-life, per weight 2: just under 2 GPU-hours.
    assert [j["standing"] for j in speech_jobs] == [pytest.approx(2 * HOUR, rel=0.01)] * 2

    [vision] = get(tenants.vision, "/api/v1/queues")
    [speech] = get(tenants.speech, "/api/v1/queues")
    assert (vision["name"], speech["name"]) == ("vision", "speech")
    assert (vision["standing"], vision["usage"]) == (0.0, 0.0)
    assert speech["standing"] == pytest.approx(2 * HOUR, rel=0.01)
    assert speech["usageGpuHours"] == pytest.approx(4.0, rel=0.01)
    # speech borrows 2 beyond its nominal 2; they are vision's idle quota, lent.
    [speech_gpus] = speech["flavors"]
    assert (speech_gpus["used"], speech_gpus["borrowed"], speech_gpus["lent"]) == (4, 2, 0)
    assert (speech["borrowed"], speech["lent"], speech["gpusInUse"]) == (2, 0, 4)
    assert (speech["pending"], speech["pendingGpus"]) == (1, 2)
    [vision_gpus] = vision["flavors"]
    assert (vision_gpus["flavor"], vision_gpus["nominal"]) == ("default", 4)
    assert (vision_gpus["used"], vision_gpus["borrowed"], vision_gpus["lent"]) == (1, 0, 2)
