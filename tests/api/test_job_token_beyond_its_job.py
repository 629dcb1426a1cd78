"""A job's own token (``KIBAN_TOKEN`` of its replicas) beyond its job: every other operation,
and every trick of the request target, denied (issue 21: "every attempt of a job's own token
beyond its job was denied").

The requests go to a real uvicorn, written byte for byte as below: an HTTP client would
normalize ``..`` away, while the server decodes ``%2F`` and ``%2e`` before routing. ``J`` is the
token's job; ``K`` another job of its tenant; ``P`` a job named after ``J``'s id, so that its id
starts with ``J``'s; ``L`` another tenant's job.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from live_server import LiveServer, RawAnswer, serve_in_thread

from kiban.api.app import create_app
from kiban.executors.base import NodeInfo
from kiban.platform import build_platform
from kiban.testing import FakeExecutor, ManualClock, manifest


def job_of(name: str, queue: str = "default") -> dict[str, Any]:
    """A job that needs no GPU, so that every one starts."""
    return manifest(name, queue=queue, gpu=0)


@dataclass
class Jobs:
    server: LiveServer
    admin: TestClient
    token: str
    ids: dict[str, str]  # J, K, P, L

    def fill(self, text: str) -> str:
        for letter, job_id in self.ids.items():
            text = text.replace("{" + letter + "}", job_id)
        return text.replace("{J_UPPER}", self.ids["J"].upper()).replace(
            "{J_SHORT}", self.ids["J"][:-1]
        )

    def send(self, method: str, target: str, body: Any = None) -> RawAnswer:
        headers = {"Authorization": f"Bearer {self.token}"}
        content = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            content = json.dumps(body).encode()
        return self.server.request(method, self.fill(target), headers, content)

    def others(self) -> list[str]:
        return [self.ids[letter] for letter in ("K", "P", "L")]

    def states(self) -> dict[str, str]:
        return {
            letter: self.admin.get(f"/api/v1/jobs/{job_id}").json()["state"]
            for letter, job_id in self.ids.items()
        }


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    tmp = tmp_path_factory.mktemp("job-token")
    clock = ManualClock()
    nodes = [
        NodeInfo(f"node-{i}", gpus=2, cpu_millis=8000, memory=2**35, labels={}) for i in (0, 1)
    ]
    executor = FakeExecutor(nodes, clock=clock)
    platform = build_platform(
        home=tmp / "home", db_url=f"sqlite:///{tmp / 'kiban.db'}", executor=executor, clock=clock
    )
    platform.loop.launcher.api_url = "http://kiban.example:8470"
    app = create_app(platform)
    admin_token = (platform.home / "token").read_text().strip()
    with TestClient(app, headers={"Authorization": f"Bearer {admin_token}"}) as admin:
        assert admin.post("/api/v1/tenants", json={"name": "speech"}).status_code == 201
        queue = {"name": "speech-q", "tenant": "speech", "quota": {"gpu": 2}}
        assert admin.post("/api/v1/queues", json=queue).status_code == 201
        ids = {}
        for letter, name, queue_name in (("J", "train", "default"), ("K", "eval", "default")):
            ids[letter] = admin.post("/api/v1/jobs", json=job_of(name, queue_name)).json()["id"]
        ids["P"] = admin.post("/api/v1/jobs", json=job_of(ids["J"])).json()["id"]
        ids["L"] = admin.post("/api/v1/jobs", json=job_of("asr", "speech-q")).json()["id"]
        assert ids["P"].startswith(ids["J"] + "-")
        platform.loop.run_once()
        for job_id in ids.values():
            executor.replicas[(job_id, 1, 0)].log.extend(f"secret of {job_id}\n".encode())
        (launch,) = [r for r in executor.launches if r.job_id == ids["J"]]
        token = dict(launch.api_env)["KIBAN_TOKEN"]
        with serve_in_thread(app) as server:
            found = Jobs(server, admin, token, ids)
            assert set(found.states().values()) == {"Running"}
            yield found
    platform.close()


def test_the_token_reads_its_own_job_and_reports_its_checkpoints(jobs: Jobs) -> None:
    """What the token may do works, so the denials below are not those of a dead token."""
    for target in ("/api/v1/jobs/{J}", "/api/v1/jobs/{J}/events", "/api/v1/whoami"):
        assert jobs.send("GET", target).status == 200, target
    logs = jobs.send("GET", "/api/v1/jobs/{J}/logs")
    assert (logs.status, logs.body) == (200, f"secret of {jobs.ids['J']}\n")
    assert jobs.send("POST", "/api/v1/jobs/{J}/checkpoint").status == 200


QUEUE = {"name": "extra", "tenant": "default", "quota": {"gpu": 2}}
SERVICE = {
    "apiVersion": "kiban/v1",
    "kind": "Service",
    "metadata": {"name": "svc"},
    "spec": {"model": {"name": "m", "storageUri": "file:///m"}},
}

# Every other operation: (method, target, body), each answered 403.
OPERATIONS: list[tuple[str, str, Any]] = [
    ("GET", "/api/v1/jobs", None),
    ("POST", "/api/v1/jobs", job_of("sneaky")),
    ("POST", "/api/v1/jobs/{J}/cancel", None),
    ("GET", "/api/v1/jobs/{K}", None),
    ("GET", "/api/v1/jobs/{K}/events", None),
    ("GET", "/api/v1/jobs/{K}/logs", None),
    ("GET", "/api/v1/jobs/{K}/logs?follow=true", None),
    ("POST", "/api/v1/jobs/{K}/cancel", None),
    ("POST", "/api/v1/jobs/{K}/checkpoint", None),
    ("GET", "/api/v1/jobs/{P}", None),
    ("GET", "/api/v1/jobs/{P}/logs", None),
    ("POST", "/api/v1/jobs/{P}/checkpoint", None),
    ("GET", "/api/v1/jobs/{L}", None),
    ("GET", "/api/v1/jobs/{L}/logs", None),
    ("POST", "/api/v1/jobs/{L}/cancel", None),
    ("GET", "/api/v1/queues", None),
    ("POST", "/api/v1/queues", QUEUE),
    ("GET", "/api/v1/nodes", None),
    ("POST", "/api/v1/nodes/node-0/cordon", None),
    ("POST", "/api/v1/nodes/node-0/uncordon", None),
    ("GET", "/api/v1/policy", None),
    ("PUT", "/api/v1/policy", {"queues": [{"name": "default"}]}),
    ("GET", "/api/v1/policy/versions", None),
    ("GET", "/api/v1/tenants", None),
    ("POST", "/api/v1/tenants", {"name": "intruders"}),
    ("POST", "/api/v1/tenants/default/tokens", {"name": "mallory"}),
    ("POST", "/api/v1/tenants/speech/tokens", {"name": "mallory"}),
    ("GET", "/api/v1/services", None),
    ("POST", "/api/v1/services", SERVICE),
    ("GET", "/api/v1/services/svc", None),
    ("GET", "/api/v1/services/svc/events", None),
    ("POST", "/api/v1/services/svc/promote", None),
    ("POST", "/api/v1/services/svc/rollback", None),
    ("DELETE", "/api/v1/services/svc", None),
]

# Tricks of the request target: (why, method, target as sent, the status it must get; 200 only
# where the target is in truth its own job's).
TRICKS: list[tuple[str, str, str, int]] = [
    ("dot segments", "GET", "/api/v1/jobs/{J}/../{K}", 404),
    ("dot segments to another route", "GET", "/api/v1/jobs/{J}/../../queues", 404),
    ("encoded dots", "GET", "/api/v1/jobs/{J}/%2e%2e/{K}", 404),
    ("encoded dots, upper case", "GET", "/api/v1/jobs/{J}/%2E%2E/{K}/logs", 404),
    ("encoded slashes", "GET", "/api/v1/jobs/{J}%2F..%2F{K}", 404),
    ("an encoded slash into another job's route", "GET", "/api/v1/jobs/{K}%2Fevents", 403),
    ("an encoded slash after its own id", "POST", "/api/v1/jobs/{J}%2Fcancel", 403),
    ("dot segments after checkpoint", "POST", "/api/v1/jobs/{J}/checkpoint/../cancel", 404),
    (
        "encoded dot segments after checkpoint",
        "POST",
        "/api/v1/jobs/{J}/checkpoint%2F..%2Fcancel",
        404,
    ),
    ("an encoded ? in the path", "POST", "/api/v1/jobs/{J}/cancel%3F/checkpoint", 404),
    ("a ; parameter", "POST", "/api/v1/jobs/{J}/cancel;/checkpoint", 404),
    ("a double slash first", "GET", "//api/v1/jobs/{K}", 404),
    ("a double slash inside", "GET", "/api/v1/jobs//{K}", 404),
    ("a double slash after its id", "GET", "/api/v1/jobs/{J}//../{K}", 404),
    ("upper-case route", "GET", "/API/V1/JOBS/{K}", 404),
    ("its own id in upper case", "GET", "/api/v1/jobs/{J_UPPER}", 403),
    ("its own id, one character short", "GET", "/api/v1/jobs/{J_SHORT}", 403),
    ("a job whose id starts with its own", "GET", "/api/v1/jobs/{P}/events", 403),
    ("its own id and more", "GET", "/api/v1/jobs/{J}x", 403),
    ("its own id and a NUL", "GET", "/api/v1/jobs/{J}%00", 403),
    ("a trailing slash on another job", "GET", "/api/v1/jobs/{K}/", 307),
    ("a trailing slash on the list", "GET", "/api/v1/jobs/", 307),
    ("a trailing slash on a cluster route", "GET", "/api/v1/queues/", 307),
    ("its own path in the query", "GET", "/api/v1/jobs?x=/api/v1/jobs/{J}", 403),
    ("its own id in the query", "GET", "/api/v1/jobs/{K}?job_id={J}", 403),
    (
        "its own checkpoint path in the query",
        "POST",
        "/api/v1/jobs/{K}/cancel?/api/v1/jobs/{J}/checkpoint",
        403,
    ),
    ("a fragment (dropped: its own job)", "GET", "/api/v1/jobs/{J}#/../{K}", 200),
    ("an absolute-form target", "GET", "http://kiban.example/api/v1/jobs/{K}", 403),
    ("an overlong id", "GET", "/api/v1/jobs/{K}" + "a" * 5000, 403),
    ("an overlong path after its own id", "GET", "/api/v1/jobs/{J}/" + "a/" * 2500, 404),
    ("HEAD of another job", "HEAD", "/api/v1/jobs/{K}", 405),
]


def assert_denied(jobs: Jobs, answer: RawAnswer, status: int) -> None:
    """The answer has ``status`` and nothing of another job (200: its own job's)."""
    assert answer.status == status, answer
    if status == 200:
        assert json.loads(answer.body)["id"] == jobs.ids["J"]
    for job_id in jobs.others():
        assert f"secret of {job_id}" not in answer.body
        assert f'"id":"{job_id}"' not in answer.body.replace(" ", ""), answer.body
    if answer.status == 403:
        assert f"this is job {jobs.ids['J']}'s token" in json.loads(answer.body)["error"]["message"]


@pytest.mark.parametrize(
    ("method", "target", "body"), OPERATIONS, ids=[f"{m} {t}" for m, t, _ in OPERATIONS]
)
def test_every_other_operation_is_refused(jobs: Jobs, method: str, target: str, body: Any) -> None:
    before = jobs.states()
    assert_denied(jobs, jobs.send(method, target, body), 403)
    assert jobs.states() == before


@pytest.mark.parametrize(
    ("method", "target", "status"),
    [(m, t, s) for _, m, t, s in TRICKS],
    ids=[why for why, *_ in TRICKS],
)
def test_no_trick_of_the_path_gets_beyond_its_job(
    jobs: Jobs, method: str, target: str, status: int
) -> None:
    before = jobs.states()
    answer = jobs.send(method, target)
    assert_denied(jobs, answer, status)
    if status == 307:  # the redirect names only the path asked for, and leads to a denial
        location = urlsplit(answer.headers["location"]).path
        assert location == jobs.fill(target).rstrip("/")
        assert_denied(jobs, jobs.send(method, location), 403)
    assert jobs.states() == before
