"""The notebooks API on the fake platform: start, list, read, stop; the owner alone sees a
notebook; readiness, culling and the start again, driven by a ManualClock and a fake Jupyter."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.domain.notebook_culling import JupyterActivity
from kiban.platform import Platform
from kiban.testing import ManualClock


@dataclass
class FakeJupyter:
    """What each notebook server says of itself (None: it does not answer)."""

    answer: JupyterActivity | None = None
    asked: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, base: str, token: str) -> JupyterActivity:
        self.asked.append((base, token))
        if self.answer is None:
            raise ConnectionError("not listening")
        return self.answer


@pytest.fixture
def jupyter(platform: Platform) -> FakeJupyter:
    fake = FakeJupyter()
    assert platform.notebooks is not None
    platform.notebooks.probe = fake
    return fake


def _member(api: TestClient, platform: Platform, name: str) -> TestClient:
    token = api.post("/api/v1/tenants/vision/tokens", json={"name": name}).json()["token"]
    return TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def alice(api: TestClient, platform: Platform) -> Iterator[TestClient]:
    """Alice, of tenant vision (queue vision-q)."""
    assert api.post("/api/v1/tenants", json={"name": "vision"}).status_code == 201
    queue = {"name": "vision-q", "tenant": "vision", "quota": {"gpu": 2}}
    assert api.post("/api/v1/queues", json=queue).status_code == 201
    with _member(api, platform, "alice") as client:
        yield client


def _pass(platform: Platform) -> None:
    """A loop pass (admits, settles) and a notebook pass at the clock's time."""
    platform.loop.run_once()
    assert platform.notebooks is not None
    platform.notebooks.run_once(platform.clock.now())


def test_start_runs_jupyter_as_an_interactive_job_without_its_token_in_sight(
    alice: TestClient, platform: Platform, jupyter: FakeJupyter
) -> None:
    started = alice.post("/api/v1/notebooks", json={"name": "lab", "gpus": 1})
    assert started.status_code == 201, started.text
    body = started.json()
    assert (body["state"], body["url"], body["owner"], body["gpus"]) == (
        "Starting",
        "/nb/vision/lab/",
        "alice",
        1,
    )
    job = alice.get(f"/api/v1/jobs/{body['jobId']}").json()
    task = job["spec"]["spec"]["tasks"][0]
    assert job["spec"]["spec"]["priorityClass"] == "interactive"
    assert "--ServerApp.base_url=/nb/vision/lab/" in task["command"]
    _pass(platform)
    assert jupyter.asked, "the running notebook's server was asked for its activity"
    _, token = jupyter.asked[-1]
    assert token not in str(job) and token not in alice.get("/api/v1/notebooks").text
    assert all(token not in str(e) for e in alice.get(f"/api/v1/jobs/{job['id']}/events").json())


def test_ready_then_culled_when_idle_but_never_while_a_kernel_executes(
    alice: TestClient, platform: Platform, jupyter: FakeJupyter, clock: ManualClock
) -> None:
    job_id = alice.post(
        "/api/v1/notebooks", json={"name": "lab", "gpus": 1, "idleTimeout": "30s"}
    ).json()["jobId"]
    _pass(platform)  # admitted and running; its server not answering yet
    assert alice.get("/api/v1/notebooks/lab").json()["state"] == "Starting"
    jupyter.answer = JupyterActivity(last_activity=clock.now(), busy_kernels=1)
    clock.advance(5)
    _pass(platform)
    assert alice.get("/api/v1/notebooks/lab").json()["state"] == "Running"
    clock.advance(120)  # long past idleTimeout, but a kernel is executing
    _pass(platform)
    assert alice.get("/api/v1/notebooks/lab").json()["state"] == "Running"
    jupyter.answer = JupyterActivity(last_activity=clock.now() - 100, busy_kernels=0)
    clock.advance(31)
    _pass(platform)
    culled = alice.get("/api/v1/notebooks/lab").json()
    assert culled["state"] == "Stopped"
    assert "idleTimeout" in culled["reason"]
    reasons = [e["reason"] for e in alice.get(f"/api/v1/jobs/{job_id}/events").json()]
    assert "Culled" in reasons
    assert alice.get(f"/api/v1/jobs/{job_id}").json()["state"] in ("Stopping", "Cancelled")

    again = alice.post("/api/v1/notebooks", json={"name": "lab"}).json()
    assert again["state"] == "Starting" and again["jobId"] != job_id
    assert again["idleTimeout"] == 30.0  # the spec is kept across stop and start


def test_a_server_that_never_answers_fails_with_the_reason_in_its_events(
    alice: TestClient, platform: Platform, jupyter: FakeJupyter, clock: ManualClock
) -> None:
    job_id = alice.post("/api/v1/notebooks", json={"name": "lab"}).json()["jobId"]
    _pass(platform)
    assert platform.notebooks is not None
    clock.advance(platform.notebooks.ready_timeout_s + 1)
    _pass(platform)
    failed = alice.get("/api/v1/notebooks/lab").json()
    assert failed["state"] == "Failed"
    events = alice.get(f"/api/v1/jobs/{job_id}/events").json()
    assert any(e["reason"] == "NotebookNotReady" for e in events)


def test_stop_releases_the_job_and_others_never_see_the_notebook(
    alice: TestClient, api: TestClient, platform: Platform, jupyter: FakeJupyter
) -> None:
    job_id = alice.post("/api/v1/notebooks", json={"name": "lab", "gpus": 1}).json()["jobId"]
    _pass(platform)
    with _member(api, platform, "bob") as bob:
        assert bob.get("/api/v1/notebooks/lab").status_code == 404
        assert bob.post("/api/v1/notebooks/lab/stop").status_code == 404
        assert bob.get("/api/v1/notebooks").json() == []
        assert bob.get("/nb/vision/lab/api/status").status_code == 404
    assert [n["name"] for n in api.get("/api/v1/notebooks").json()] == ["lab"]  # an admin
    stopped = alice.post("/api/v1/notebooks/lab/stop")
    assert stopped.status_code == 200 and stopped.json()["state"] == "Stopped"
    reasons = [e["reason"] for e in alice.get(f"/api/v1/jobs/{job_id}/events").json()]
    assert "NotebookStopped" in reasons


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"idleTimeout": "soon"}, "idleTimeout"),
        ({"maxLifetime": "0s"}, "maxLifetime"),
        ({"name": "Not_A_Name"}, "name"),
        ({"gpus": -1}, "gpus"),
        ({"queue": "nope"}, "queue"),
    ],
)
def test_bad_input_names_the_field_and_starts_nothing(
    alice: TestClient, body: dict[str, object], field: str
) -> None:
    answer = alice.post("/api/v1/notebooks", json=body)
    assert answer.status_code == 422, answer.text
    assert field in [p["field"] for p in answer.json()["error"]["problems"]]
    assert alice.get("/api/v1/notebooks").json() == []
    assert alice.get("/api/v1/jobs").json() == []


def test_an_admin_names_the_queue_of_a_new_notebook_not_of_one_that_exists(
    api: TestClient, platform: Platform, jupyter: FakeJupyter
) -> None:
    refused = api.post("/api/v1/notebooks", json={"name": "ops"})
    assert refused.status_code == 422
    assert [p["field"] for p in refused.json()["error"]["problems"]] == ["queue"]
    started = api.post("/api/v1/notebooks", json={"name": "ops", "queue": "default"})
    assert started.status_code == 201, started.text
    assert api.post("/api/v1/notebooks/ops/stop").json()["state"] == "Stopped"
    again = api.post("/api/v1/notebooks", json={"name": "ops"})
    assert again.status_code == 201 and again.json()["tenant"] == "default"


def test_culling_reads_jupyters_own_activity_report_at_the_notebooks_address(
    alice: TestClient, platform: Platform, clock: ManualClock
) -> None:
    """The controller's own probe (no test stand-in): ``/api/status`` and ``/api/kernels`` of
    the server at the address the route uses, with Jupyter's token, not counted as activity."""
    seen: list[httpx.Request] = []
    last_activity, kernel_state = clock.now(), ["busy"]

    def jupyter(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/nb/vision/lab/api/status":
            when = datetime.fromtimestamp(last_activity, UTC).isoformat().replace("+00:00", "Z")
            return httpx.Response(200, json={"last_activity": when, "connections": 1})
        if request.url.path == "/nb/vision/lab/api/kernels":
            return httpx.Response(200, json=[{"id": "k", "execution_state": kernel_state[0]}])
        return httpx.Response(404)

    assert platform.notebooks is not None
    platform.notebooks.probe = None
    platform.notebooks._http = httpx.Client(transport=httpx.MockTransport(jupyter))
    job_id = alice.post("/api/v1/notebooks", json={"name": "lab", "idleTimeout": "30s"}).json()[
        "jobId"
    ]
    _pass(platform)
    assert alice.get("/api/v1/notebooks/lab").json()["state"] == "Running"
    status, kernels = seen[-2:]
    assert status.url.host == kernels.url.host == f"{job_id}.fake"
    assert status.headers["authorization"] == kernels.headers["authorization"]
    assert status.headers["authorization"].startswith("token ")
    assert kernels.url.params["no_track_activity"] == "1"

    clock.advance(120)  # idle by its last activity, but its kernel is executing
    _pass(platform)
    assert alice.get("/api/v1/notebooks/lab").json()["state"] == "Running"
    kernel_state[0] = "idle"
    clock.advance(5)
    _pass(platform)
    culled = alice.get("/api/v1/notebooks/lab").json()
    assert culled["state"] == "Stopped" and "idle 1" in culled["reason"]  # idle 125 s
