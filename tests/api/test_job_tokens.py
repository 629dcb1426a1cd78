"""A job's own token: its replicas get it with the API's URL, it reads that job and reports its
checkpoints and nothing else, and it ends with the job (or its attempt)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_auth import ENDPOINTS, JOB

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.testing import FakeExecutor, ManualClock, submit

URL = "http://kiban.example:8470"


def submit_job(api: TestClient, **spec: Any) -> str:
    """Submit test_auth's JOB, ``spec`` replacing keys of its spec; its id."""
    return str(submit(api, {**JOB, "spec": {**JOB["spec"], **spec}})["id"])


def replica_env(executor: FakeExecutor, job_id: str) -> dict[str, str]:
    (request,) = [r for r in executor.launches if r.job_id == job_id][-1:]
    return dict(request.api_env)


@pytest.fixture
def as_job(platform: Platform) -> Iterator[Any]:
    clients: list[TestClient] = []

    def client(token: str) -> TestClient:
        made = TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"})
        clients.append(made.__enter__())
        return made

    yield client
    for made in clients:
        made.__exit__(None, None, None)


def test_replicas_get_the_url_and_a_token_that_reads_their_job_and_reports_checkpoints(
    api: TestClient, platform: Platform, executor: FakeExecutor, clock: ManualClock, as_job: Any
) -> None:
    platform.loop.launcher.api_url = URL
    job_id = submit_job(api)
    platform.loop.run_once()
    env = replica_env(executor, job_id)
    assert env["KIBAN_URL"] == URL
    job = as_job(env["KIBAN_TOKEN"])

    assert job.get("/api/v1/whoami").json() == {
        "name": f"job {job_id}",
        "tenant": "default",
        "isAdmin": False,
        "jobId": job_id,
        "role": "job",
        "member": f"job {job_id}",
    }
    assert job.get(f"/api/v1/jobs/{job_id}").json()["state"] == "Running"
    assert job.get(f"/api/v1/jobs/{job_id}/events").status_code == 200
    clock.advance(60)
    answer = job.post(f"/api/v1/jobs/{job_id}/checkpoint")
    assert answer.status_code == 200, answer.text
    last = api.get(f"/api/v1/jobs/{job_id}/events").json()[-1]
    assert last["message"] == f"checkpoint reported by job {job_id} (attempt 1)"
    # not even its own job may it cancel
    assert job.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 403
    assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "Running"


@pytest.mark.parametrize(
    ("method", "path", "body"), ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in ENDPOINTS]
)
def test_beyond_its_job_a_job_token_is_refused(
    api: TestClient,
    platform: Platform,
    executor: FakeExecutor,
    as_job: Any,
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    platform.loop.launcher.api_url = URL
    job_id = submit_job(api)
    platform.loop.run_once()
    token = replica_env(executor, job_id)["KIBAN_TOKEN"]
    answer = as_job(token).request(method, path, json=body)
    if path == "/api/v1/whoami":
        assert answer.status_code == 200
    else:
        assert answer.status_code == 403, answer.text
        assert f"this is job {job_id}'s token" in answer.json()["error"]["message"]
    assert api.get("/api/v1/jobs").json()[0]["id"] == job_id  # nothing was submitted


def test_the_token_ends_with_its_attempt_and_its_job(
    api: TestClient, platform: Platform, executor: FakeExecutor, as_job: Any
) -> None:
    platform.loop.launcher.api_url = URL
    job_id = submit_job(api, restartPolicy="OnFailure")
    platform.loop.run_once()
    first = replica_env(executor, job_id)["KIBAN_TOKEN"]
    executor.finish(job_id, 0, 1)
    platform.loop.run_once()
    platform.loop.run_once()  # restarted: attempt 2 has a token of its own
    second = replica_env(executor, job_id)["KIBAN_TOKEN"]
    assert second != first
    assert as_job(first).get(f"/api/v1/jobs/{job_id}").status_code == 401
    assert as_job(second).get(f"/api/v1/jobs/{job_id}").status_code == 200
    executor.finish(job_id, 0, 0)
    platform.loop.run_once()
    assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "Succeeded"
    assert as_job(second).get(f"/api/v1/jobs/{job_id}").status_code == 401


def test_the_token_ends_when_its_job_returns_to_its_queue(
    api: TestClient, platform: Platform, executor: FakeExecutor, as_job: Any, clock: ManualClock
) -> None:
    """Preempted: its replicas are gone, so their token goes too, not at the next launch."""
    platform.loop.launcher.api_url = URL

    def gang(replicas: int) -> list[dict[str, Any]]:
        return [{**JOB["spec"]["tasks"][0], "replicas": replicas, "resources": {"gpu": 2}}]

    low = submit_job(api, tasks=gang(3), priorityClass="low")
    platform.loop.run_once()
    token = replica_env(executor, low)["KIBAN_TOKEN"]
    assert as_job(token).get(f"/api/v1/jobs/{low}").status_code == 200
    high = submit_job(api, tasks=gang(1), priorityClass="high")
    for _ in range(3):
        clock.advance(1)
        platform.loop.run_once()
    assert api.get(f"/api/v1/jobs/{high}").json()["state"] == "Running"
    assert api.get(f"/api/v1/jobs/{low}").json()["state"] == "Pending"
    assert as_job(token).get(f"/api/v1/jobs/{low}").status_code == 401


def test_without_a_url_replicas_get_neither(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit_job(api)
    platform.loop.run_once()
    assert replica_env(executor, job_id) == {}
