"""``POST /jobs/{id}/checkpoint``: a running job reports a checkpoint, and preemption uses it."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban import testing
from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.testing import FakeExecutor, ManualClock, submit
from kiban.testing.sdk_app import client_through

# These tests' jobs take 2 GPUs unless they say otherwise.
manifest = partial(testing.manifest, gpu=2)


def error(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    return str(response.json()["error"]["message"])


def test_a_running_job_reports_a_checkpoint(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    job = submit(api, manifest("train"))["id"]
    platform.loop.run_once()
    clock.advance(120)
    answer = api.post(f"/api/v1/jobs/{job}/checkpoint")
    assert answer.status_code == 200, answer.text
    assert answer.json()["lastCheckpointAt"] == clock.now()
    assert api.get(f"/api/v1/jobs/{job}").json()["lastCheckpointAt"] == clock.now()
    last = api.get(f"/api/v1/jobs/{job}/events").json()[-1]
    assert (last["reason"], last["at"]) == ("Checkpointed", clock.now())
    assert last["message"] == "checkpoint reported by admin (attempt 1)"


def test_only_a_running_job_can_report_one(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    running = submit(api, manifest("big", replicas=3))["id"]  # all 6 GPUs
    waiting = submit(api, manifest("waiting"))["id"]
    platform.loop.run_once()
    message = error(api.post(f"/api/v1/jobs/{waiting}/checkpoint"), 409)
    assert message == f"job {waiting} is Pending; only a running job can report a checkpoint"
    executor.finish_all(running)
    platform.loop.run_once()
    assert "is Succeeded" in error(api.post(f"/api/v1/jobs/{running}/checkpoint"), 409)
    assert api.get(f"/api/v1/jobs/{running}").json()["lastCheckpointAt"] is None


@pytest.mark.parametrize("job_id", ["no-such-job-zzzzzz", "Bad%20Id", "x" * 81])
def test_an_unknown_job_is_404(api: TestClient, job_id: str) -> None:
    assert "not found" in error(api.post(f"/api/v1/jobs/{job_id}/checkpoint"), 404)


def test_another_tenants_job_is_404_and_unchanged(api: TestClient, platform: Platform) -> None:
    job = submit(api, manifest("train"))["id"]
    platform.loop.run_once()
    assert api.post("/api/v1/tenants", json={"name": "speech"}).status_code == 201
    token = api.post("/api/v1/tenants/speech/tokens", json={"name": "bob"}).json()["token"]
    with TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"}) as bob:
        assert error(bob.post(f"/api/v1/jobs/{job}/checkpoint"), 404) == f"job {job} not found"
    assert api.get(f"/api/v1/jobs/{job}").json()["lastCheckpointAt"] is None
    anonymous = TestClient(create_app(platform))
    assert anonymous.post(f"/api/v1/jobs/{job}/checkpoint").status_code == 401


@pytest.mark.parametrize("freshest", [0, 1, 2])
def test_preemption_spares_the_jobs_that_would_lose_more_work(
    api: TestClient, platform: Platform, clock: ManualClock, freshest: int
) -> None:
    """Three equal low jobs; the one that reported a checkpoint most recently is the victim."""
    low = [submit(api, manifest(f"low-{i}", priorityClass="low"))["id"] for i in range(3)]
    platform.loop.run_once()
    others = [job for i, job in enumerate(low) if i != freshest]
    for job, after in ((others[0], 100), (others[1], 200), (low[freshest], 290)):
        clock.advance(after)
        assert api.post(f"/api/v1/jobs/{job}/checkpoint").status_code == 200
    clock.advance(10)  # work since the last checkpoint: 500s, 300s and 10s
    urgent = submit(api, manifest("urgent", priorityClass="high"))["id"]
    platform.loop.run_once()
    states = {job: api.get(f"/api/v1/jobs/{job}").json() for job in low}
    assert [states[job]["state"] == "Stopping" for job in low] == [i == freshest for i in range(3)]
    assert states[low[freshest]]["preemptedBy"] == urgent


def test_the_sdk_reports_for_the_job_it_runs_in(
    api: TestClient, platform: Platform, admin_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = submit(api, manifest("train"))["id"]
    platform.loop.run_once()
    client = client_through(api, admin_token)
    monkeypatch.delenv("KIBAN_JOB_ID", raising=False)
    with pytest.raises(ValueError, match="KIBAN_JOB_ID"):
        client.checkpoint()
    monkeypatch.setenv("KIBAN_JOB_ID", job)
    assert client.checkpoint()["lastCheckpointAt"] is not None
