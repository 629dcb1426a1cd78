"""The jobs API: submit, list, get, cancel, events and logs, driven by the fake executor."""

from __future__ import annotations

import threading
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import unquote

import anyio
import pytest
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.executors.base import Capability
from kiban.platform import Platform
from kiban.testing import FakeExecutor, ManualClock, manifest, submit


def state_of(api: TestClient, job_id: str) -> str:
    state: str = api.get(f"/api/v1/jobs/{job_id}").json()["state"]
    return state


def assert_error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["status"] == status
    return error


# -- submit ------------------------------------------------------------------------------------


def test_submit_json_creates_a_pending_job(api: TestClient) -> None:
    document = manifest("train", replicas=2, gpu=2)
    job = submit(api, document)
    assert job["id"].startswith("train-")
    assert job["name"] == "train"
    assert job["state"] == "Pending"
    assert (job["tenant"], job["queue"]) == ("default", "default")
    assert (job["replicaCount"], job["gpus"]) == (2, 4)
    assert job["priority"] == 1000  # the "normal" class
    assert job["submittedAt"] == 1_700_000_000.0
    assert job["replicas"] is None and job["spec"] is None  # only GET shows those

    stored = api.get(f"/api/v1/jobs/{job['id']}").json()
    assert stored["spec"] == document
    assert stored["state"] == "Pending"
    assert stored["replicas"] == []


def test_a_local_executor_warns_of_the_container_fields_it_ignores(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    assert submit(api, manifest("boxed", masterPort=29500))["warnings"] == []
    executor.capabilities -= {Capability.CONTAINERS}
    platform.refresh_facts()
    document = manifest("boxed", masterPort=29500)
    document["spec"]["tasks"][0]["image"] = "pytorch/pytorch:2.4"
    assert submit(api, document)["warnings"] == [
        "the local executor runs each replica as a local process and ignores container-only "
        "fields: spec.tasks[0].image, spec.masterPort (its port: a free one is used)"
    ]
    assert submit(api, manifest("plain"))["warnings"] == []


def test_an_mpi_job_is_refused_where_mpirun_is_not_available(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    executor.capabilities -= {Capability.MPI}
    platform.refresh_facts()
    document = manifest("mpi")
    document["spec"]["launcher"] = "mpirun"
    document["spec"]["tasks"] = [
        {"name": "launcher", "command": ["mpirun", "-n", "2", "hostname"]},
        {"name": "worker", "replicas": 2, "command": ["sleep", "1"]},
    ]
    refused = api.post("/api/v1/jobs", json=document)
    assert refused.status_code == 422, refused.text
    [problem] = refused.json()["error"]["problems"]
    assert problem["field"] == "spec.launcher" and "Open MPI" in problem["message"]
    assert api.get("/api/v1/jobs").json() == []  # nothing stored


def test_affinity_that_cannot_steer_placement_is_warned_of(api: TestClient) -> None:
    """kiban binds each pod to its node: pod (anti-)affinity would be carried by the pod and
    change nothing, so the submitter is told (node affinity, required or preferred, steers
    kiban's own choice)."""
    zone = {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}
    document = manifest("spread")
    document["spec"]["tasks"][0]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [zone]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": zone}],
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {}, "topologyKey": "kubernetes.io/hostname"}
            ]
        },
    }
    job = submit(api, document)
    assert job["warnings"] == [
        "spec.tasks[0].affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        "[0]: no effect (kiban chooses each replica's node and binds its pod there, by "
        "nodeSelector, node affinity and maxReplicasPerNode, not by other pods)"
    ]
    assert api.get(f"/api/v1/jobs/{job['id']}").json()["spec"] == document  # kept as written
    required_only = manifest("zoned")
    required_only["spec"]["tasks"][0]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [zone]}
        }
    }
    assert submit(api, required_only)["warnings"] == []


def test_submit_yaml_is_the_same_as_json(api: TestClient) -> None:
    text = """\
apiVersion: kiban/v1
kind: Job
metadata:
  name: finetune
  labels: {team: vision}
spec:
  priorityClass: high
  maxRuntime: 2h
  tasks:
    - name: worker
      replicas: 3
      resources: {gpu: 1, cpu: 2, memory: 4Gi}
      command: [python, finetune.py, --epochs, "3"]
      env: {SEED: 7}
"""
    response = api.post(
        "/api/v1/jobs", content=text.encode(), headers={"Content-Type": "application/yaml"}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["state"] == "Pending"
    assert job["name"] == "finetune"
    assert (job["replicaCount"], job["gpus"]) == (3, 3)
    assert job["priority"] == 10000
    stored = api.get(f"/api/v1/jobs/{job['id']}").json()
    assert stored["spec"] == yaml.safe_load(text)


def test_every_submission_gets_its_own_id(api: TestClient) -> None:
    ids = {submit(api, manifest("same"))["id"] for _ in range(5)}
    assert len(ids) == 5


# -- list --------------------------------------------------------------------------------------


@pytest.fixture
def assorted(api: TestClient, platform: Platform, clock: ManualClock) -> dict[str, str]:
    """Jobs in several states and two queues; returns name -> id."""
    created = api.post("/api/v1/queues", json={"name": "batch", "tenant": "default"})
    assert created.status_code == 201, created.text
    ids: dict[str, str] = {}
    for name, document in [
        ("big", manifest("big", replicas=3, gpu=2)),  # all 6 GPUs: runs
        ("waiting", manifest("waiting", gpu=1)),  # no GPU left: stays pending
        ("dropped", manifest("dropped", gpu=1)),  # cancelled while pending
        ("other", manifest("other", gpu=1, queue="batch")),  # pending, other queue
    ]:
        clock.advance(1)
        ids[name] = submit(api, document)["id"]
    platform.loop.run_once()
    assert api.post(f"/api/v1/jobs/{ids['dropped']}/cancel").status_code == 200
    return ids


def names(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    return [j["name"] for j in response.json()]


def test_list_is_newest_first(api: TestClient, assorted: dict[str, str]) -> None:
    assert names(api.get("/api/v1/jobs")) == ["other", "dropped", "waiting", "big"]


def test_list_filters_by_state_repeatable(api: TestClient, assorted: dict[str, str]) -> None:
    assert names(api.get("/api/v1/jobs", params={"state": "Running"})) == ["big"]
    assert names(api.get("/api/v1/jobs", params={"state": "Cancelled"})) == ["dropped"]
    both = api.get("/api/v1/jobs", params=[("state", "Pending"), ("state", "Cancelled")])
    assert names(both) == ["other", "dropped", "waiting"]
    assert names(api.get("/api/v1/jobs", params={"state": "Succeeded"})) == []


def test_list_filters_by_queue_name_and_tenant(api: TestClient, assorted: dict[str, str]) -> None:
    assert names(api.get("/api/v1/jobs", params={"queue": "batch"})) == ["other"]
    assert names(api.get("/api/v1/jobs", params={"queue": "default", "state": "Pending"})) == [
        "waiting"
    ]
    assert names(api.get("/api/v1/jobs", params={"name": "waiting"})) == ["waiting"]
    assert names(api.get("/api/v1/jobs", params={"tenant": "default"})) == [
        "other",
        "dropped",
        "waiting",
        "big",
    ]
    assert names(api.get("/api/v1/jobs", params={"queue": "nonexistent"})) == []


def test_list_limit(api: TestClient, assorted: dict[str, str]) -> None:
    assert names(api.get("/api/v1/jobs", params={"limit": 1})) == ["other"]
    assert names(api.get("/api/v1/jobs", params={"limit": 2})) == ["other", "dropped"]
    assert len(names(api.get("/api/v1/jobs", params={"limit": 1000}))) == 4


@pytest.mark.parametrize("limit", ["0", "-1", "1001", "many"])
def test_list_limit_out_of_bounds_is_422(api: TestClient, limit: str) -> None:
    error = assert_error(api.get("/api/v1/jobs", params={"limit": limit}), 422)
    assert [p["field"] for p in error["problems"]] == ["limit"]


def test_list_unknown_state_is_422_naming_which(api: TestClient) -> None:
    response = api.get("/api/v1/jobs", params=[("state", "Pending"), ("state", "Sleeping")])
    error = assert_error(response, 422)
    assert [p["field"] for p in error["problems"]] == ["state[1]"]
    assert "Running" in error["problems"][0]["message"]  # lists the known states


# -- get ---------------------------------------------------------------------------------------


def test_get_shows_spec_and_replicas_after_a_scheduling_pass(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    document = manifest("ddp", replicas=2, gpu=2)
    job_id = submit(api, document)["id"]
    platform.loop.run_once()

    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "Running"
    assert job["spec"] == document
    assert job["admittedAt"] is not None and job["startedAt"] is not None
    assert job["masterPort"] is not None
    replicas = job["replicas"]
    assert [r["rank"] for r in replicas] == [0, 1]
    assert [(r["task"], r["index"]) for r in replicas] == [("worker", 0), ("worker", 1)]
    assert all(r["state"] == "Running" and r["pid"] for r in replicas)
    # Two GPUs a replica on nodes of two GPUs: each replica has a whole node.
    assert len({r["node"] for r in replicas}) == 2
    assert all(sorted(r["gpuIds"]) == [0, 1] for r in replicas)
    launched = executor.launches[-1]
    assert launched.job_id == job_id
    assert {p.node for p in launched.placements} == {r["node"] for r in replicas}


def test_get_of_a_waiting_job_explains_why(api: TestClient, platform: Platform) -> None:
    submit(api, manifest("hog", replicas=3, gpu=2))
    waiting = submit(api, manifest("late", gpu=1))["id"]
    platform.loop.run_once()
    job = api.get(f"/api/v1/jobs/{waiting}").json()
    assert job["state"] == "Pending"
    assert job["reason"] is not None
    assert job["reason"]["code"]
    assert job["reason"]["message"]
    assert job["replicas"] == []


# -- cancel ------------------------------------------------------------------------------------


def test_cancel_pending_job(api: TestClient, platform: Platform, executor: FakeExecutor) -> None:
    job_id = submit(api, manifest())["id"]
    response = api.post(f"/api/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "Cancelled"
    assert response.json()["finishedAt"] is not None
    platform.loop.run_once()
    assert state_of(api, job_id) == "Cancelled"
    assert executor.launches == []  # a cancelled job is never started


def running_job(api: TestClient, platform: Platform, replicas: int = 2) -> str:
    job_id: str = submit(api, manifest(replicas=replicas))["id"]
    platform.loop.run_once()
    assert state_of(api, job_id) == "Running"
    return job_id


def test_cancel_running_job_stops_its_replicas_gracefully(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    job_id = running_job(api, platform)
    response = api.post(f"/api/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200
    assert response.json()["state"] == "Stopping"
    # No time passes: well inside the 30 s grace period.
    platform.loop.run_once()  # asks the replicas to stop (SIGTERM)
    for rank in (0, 1):
        assert executor.replicas[(job_id, 1, rank)].stop_requests[:1] == [False]
    platform.loop.run_once()  # sees them exit
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "Cancelled"
    assert [r["exitCode"] for r in job["replicas"]] == [143, 143]  # terminated, not killed
    reasons = [e["reason"] for e in api.get(f"/api/v1/jobs/{job_id}/events").json()]
    assert "Killed" not in reasons
    assert reasons[-1] == "Cancelled"


def test_cancel_kills_replicas_that_ignore_sigterm_after_the_grace_period(
    api: TestClient, platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    job_id = running_job(api, platform)
    for rank in (0, 1):
        executor.replicas[(job_id, 1, rank)].ignores_sigterm = True
    assert api.post(f"/api/v1/jobs/{job_id}/cancel").json()["state"] == "Stopping"
    clock.advance(10)
    platform.loop.run_once()
    platform.loop.run_once()
    assert state_of(api, job_id) == "Stopping"  # still inside the 30 s grace period
    assert len(executor.running(job_id)) == 2

    clock.advance(21)
    platform.loop.run_once()
    platform.loop.run_once()
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "Cancelled"
    assert [r["exitCode"] for r in job["replicas"]] == [137, 137]
    assert executor.running(job_id) == []
    reasons = [e["reason"] for e in api.get(f"/api/v1/jobs/{job_id}/events").json()]
    assert reasons.count("Killed") == 1
    assert reasons[-1] == "Cancelled"
    # Once it is over, cancelling again is refused.
    assert_error(api.post(f"/api/v1/jobs/{job_id}/cancel"), 409)


def test_cancel_finished_job_is_409(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit(api, manifest())["id"]
    platform.loop.run_once()
    executor.finish_all(job_id, 0)
    platform.loop.run_once()
    assert state_of(api, job_id) == "Succeeded"

    error = assert_error(api.post(f"/api/v1/jobs/{job_id}/cancel"), 409)
    assert "Succeeded" in error["message"]
    assert state_of(api, job_id) == "Succeeded"


def test_cancel_twice_is_409(api: TestClient) -> None:
    job_id = submit(api, manifest())["id"]
    assert api.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
    assert_error(api.post(f"/api/v1/jobs/{job_id}/cancel"), 409)
    events = api.get(f"/api/v1/jobs/{job_id}/events").json()
    assert [e["reason"] for e in events] == ["Submitted", "Cancelled"]


# -- unknown jobs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("GET", ""), ("POST", "/cancel"), ("GET", "/events"), ("GET", "/logs")],
)
def test_unknown_job_is_404(api: TestClient, method: str, suffix: str) -> None:
    submit(api, manifest("train"))
    error = assert_error(api.request(method, f"/api/v1/jobs/train-zzzzzz{suffix}"), 404)
    assert "train-zzzzzz" in error["message"]


# -- events ------------------------------------------------------------------------------------


def test_events_tell_the_story_in_order(
    api: TestClient, platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    job_id = submit(api, manifest(replicas=2))["id"]
    clock.advance(5)
    platform.loop.run_once()
    clock.advance(60)
    executor.finish(job_id, 0, 0)
    executor.finish(job_id, 1, 0)
    platform.loop.run_once()

    events = api.get(f"/api/v1/jobs/{job_id}/events").json()
    reasons = [e["reason"] for e in events]
    assert reasons == [
        "Submitted",
        "Admitted",
        "Started",
        "ReplicaExited",
        "ReplicaExited",
        "Succeeded",
    ]
    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    times = [e["at"] for e in events]
    assert times == sorted(times)
    assert times[0] == 1_700_000_000.0 and times[-1] == 1_700_000_065.0
    assert all(e["type"] == "Normal" for e in events)

    tail = api.get(f"/api/v1/jobs/{job_id}/events", params={"after": ids[2]}).json()
    assert [e["id"] for e in tail] == ids[3:]
    assert api.get(f"/api/v1/jobs/{job_id}/events", params={"after": 2**31 - 1}).json() == []


def test_events_of_one_job_only(api: TestClient, platform: Platform) -> None:
    first = submit(api, manifest("first"))["id"]
    second = submit(api, manifest("second"))["id"]
    api.post(f"/api/v1/jobs/{second}/cancel")
    events = api.get(f"/api/v1/jobs/{first}/events").json()
    assert [e["reason"] for e in events] == ["Submitted"]
    assert "admin" in events[0]["message"]  # who submitted it
    second_events = api.get(f"/api/v1/jobs/{second}/events").json()
    assert [e["reason"] for e in second_events] == ["Submitted", "Cancelled"]


# -- logs --------------------------------------------------------------------------------------


def test_logs_of_a_replica(api: TestClient, platform: Platform, executor: FakeExecutor) -> None:
    job_id = submit(api, manifest(replicas=2))["id"]
    platform.loop.run_once()
    executor.replicas[(job_id, 1, 0)].log.extend(b"rank zero says hi\n")
    executor.replicas[(job_id, 1, 1)].log.extend("rank one: loss=0.25 \u2713\n".encode())

    response = api.get(f"/api/v1/jobs/{job_id}/logs")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == "rank zero says hi\n"
    assert api.get(f"/api/v1/jobs/{job_id}/logs", params={"rank": 1}).text == (
        "rank one: loss=0.25 \u2713\n"
    )
    tail = api.get(f"/api/v1/jobs/{job_id}/logs", params={"rank": 0, "offset": 5})
    assert tail.text == "zero says hi\n"


def test_a_slow_log_read_does_not_hold_up_other_requests(
    api: TestClient, platform: Platform, executor: FakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Kubernetes a log read waits on the API server and a node: not on the event loop."""
    job_id = submit(api, manifest())["id"]
    platform.loop.run_once()
    reading, release, returned = threading.Event(), threading.Event(), threading.Event()
    original = executor.read_log

    def slow_read(*args: Any) -> tuple[bytes, int]:
        reading.set()
        release.wait(5)
        returned.set()
        return original(*args)

    monkeypatch.setattr(executor, "read_log", slow_read)
    out: list[Any] = []
    logs = threading.Thread(target=lambda: out.append(api.get(f"/api/v1/jobs/{job_id}/logs")))
    logs.start()
    try:
        assert reading.wait(10)
        assert api.get(f"/api/v1/jobs/{job_id}").status_code == 200
        assert not returned.is_set()  # answered while the read still waited
    finally:
        release.set()
        logs.join(10)
    assert out[0].status_code == 200


def test_logs_before_launch_are_empty(api: TestClient) -> None:
    job_id = submit(api, manifest())["id"]
    response = api.get(f"/api/v1/jobs/{job_id}/logs")
    assert response.status_code == 200
    assert response.content == b""


@pytest.mark.parametrize("rank", ["2", "100", "-1", "zero"])
def test_logs_rank_out_of_range_is_422(api: TestClient, platform: Platform, rank: str) -> None:
    job_id = submit(api, manifest(replicas=2))["id"]
    platform.loop.run_once()
    error = assert_error(api.get(f"/api/v1/jobs/{job_id}/logs", params={"rank": rank}), 422)
    assert [p["field"] for p in error["problems"]] == ["rank"]


def test_follow_on_a_finished_job_returns_everything_and_ends(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit(api, manifest())["id"]
    platform.loop.run_once()
    executor.replicas[(job_id, 1, 0)].log.extend(b"x" * 200_000)  # more than one chunk
    executor.finish_all(job_id, 0)
    platform.loop.run_once()
    response = api.get(f"/api/v1/jobs/{job_id}/logs", params={"follow": "true"})
    assert response.status_code == 200
    assert response.content == b"x" * 200_000


@pytest.mark.timeout(60)
def test_follow_streams_until_the_job_ends(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit(api, manifest())["id"]
    platform.loop.run_once()
    log = executor.replicas[(job_id, 1, 0)].log
    log.extend(b"epoch 1\n")

    def job_goes_on(got: bytes) -> None:
        """What the job writes next, once the reader has what it wrote so far."""
        if got == b"epoch 1\n":
            log.extend(b"epoch 2\n")
        elif got == b"epoch 1\nepoch 2\n":
            log.extend(b"done\n")
            executor.finish_all(job_id, 0)
            platform.loop.run_once()

    got = b""
    url = f"/api/v1/jobs/{job_id}/logs"
    with api.stream("GET", url, params={"follow": "true"}) as response:
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            got += chunk
            job_goes_on(got)
    assert got.decode() == "epoch 1\nepoch 2\ndone\n"
    assert state_of(api, job_id) == "Succeeded"


# -- path tricks -------------------------------------------------------------------------------


def raw_get(app: FastAPI, raw_path: str, token: str) -> tuple[int, bytes]:
    """GET a path exactly as given (an HTTP client would normalize ``..`` away)."""
    path, _, query = raw_path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": unquote(path),
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    status = 0
    body = b""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status, body
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body += message.get("body", b"")

    async def call() -> None:
        await app(scope, receive, send)

    anyio.run(call)
    return status, body


TRICKS = [
    "/api/v1/jobs/..",
    "/api/v1/jobs/../x",
    "/api/v1/jobs/../../token",
    "/api/v1/jobs/%2e%2e",
    "/api/v1/jobs/%2e%2e/logs",
    "/api/v1/jobs/%2e%2e/events",
    "/api/v1/jobs/%2e%2e%2f%2e%2e%2ftoken/logs",
    "/api/v1/jobs/..%2F..%2Ftoken/logs",
    "/api/v1/jobs/..%5c..%5ctoken/logs",
    "/api/v1/jobs/{job}/../{job}/logs",
    "/api/v1/jobs/{job}%2f..%2f..%2ftoken/logs",
    "/api/v1/jobs/..{job}/logs?rank=0",
    "/api/v1/jobs/%00/logs",
]


@pytest.mark.parametrize("trick", TRICKS)
def test_job_ids_with_path_tricks_serve_nothing(
    api: TestClient, platform: Platform, executor: FakeExecutor, admin_token: str, trick: str
) -> None:
    job_id = submit(api, manifest())["id"]
    platform.loop.run_once()
    executor.replicas[(job_id, 1, 0)].log.extend(b"SECRET LOG LINE\n")
    status, body = raw_get(create_app(platform), trick.format(job=job_id), admin_token)
    assert status in (404, 422), (status, body)
    assert b"SECRET LOG LINE" not in body
    assert admin_token.encode() not in body
    # Through the HTTP client too, which resolves dot segments before sending: a path that
    # then names the job's own logs is a fair request, not a trick.
    response = api.get(trick.format(job=job_id))
    if response.url.path == f"/api/v1/jobs/{job_id}/logs":
        assert "/../" in trick
        return
    assert response.status_code in (404, 422)
    assert "SECRET LOG LINE" not in response.text
    assert admin_token not in response.text
