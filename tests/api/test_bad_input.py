"""Bad manifests and bad requests: a 422 naming the exact field, and nothing stored."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from kiban.platform import Platform
from kiban.store.models import ApiToken, Event, Job, Queue, Tenant

YAML = "application/yaml"
JSON = "application/json"


def job(**spec: Any) -> dict[str, Any]:
    """A valid manifest, with ``spec`` keys replaced (a value of None removes the key)."""
    body: dict[str, Any] = {
        "queue": "default",
        "tasks": [{"replicas": 2, "resources": {"gpu": 1}, "command": ["python", "train.py"]}],
    }
    for key, value in spec.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return {"apiVersion": "kiban/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": body}


def task(**fields: Any) -> list[dict[str, Any]]:
    base: dict[str, Any] = {"replicas": 1, "resources": {"gpu": 1}, "command": ["python", "t.py"]}
    base.update(fields)
    return [base]


def as_json(document: Any) -> tuple[bytes, str]:
    return json.dumps(document).encode(), JSON


def as_yaml(document: Any) -> tuple[bytes, str]:
    return yaml.safe_dump(document).encode(), YAML


def raw(text: str, content_type: str = YAML) -> tuple[bytes, str]:
    return text.encode(), content_type


VALID_HEAD = "apiVersion: kiban/v1\nkind: Job\nmetadata: {name: train}\n"
HEAD_NO_METADATA = "apiVersion: kiban/v1\nkind: Job\n"
ONE_TASK = "spec: {tasks: [{command: [x]}]}\n"
MPI_HEAD = "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: pi}\n"
MPI_LAUNCHER = "Launcher: {template: {spec: {containers: [{name: l, command: [mpirun]}]}}}"
MPI_WORKER = "Worker: {replicas: 2, template: {spec: {containers: [{name: w, command: [sshd]}]}}}"

# (case id, (body, content type), the one field path the error must name)
CASES: list[tuple[str, tuple[bytes, str], str]] = [
    ("invalid-yaml", raw("apiVersion: kiban/v1\nspec: [unclosed\n"), ""),
    ("yaml-tab-indent", raw("apiVersion: kiban/v1\nkind: Job\n\tmetadata: x\n"), ""),
    ("invalid-json", raw('{"apiVersion": "kiban/v1",', JSON), ""),
    ("empty-body", raw(""), ""),
    ("yaml-list", raw("- apiVersion: kiban/v1\n- kind: Job\n"), ""),
    ("yaml-scalar", raw("just some words"), ""),
    ("json-array", as_json([job()]), ""),
    ("two-yaml-documents", raw("a: 1\n---\nb: 2\n"), ""),
    ("not-utf8", (b"apiVersion: kiban/v1\nkind: \xff\xfe\n", YAML), ""),
    ("larger-than-1MiB", raw("# " + "x" * (1024 * 1024) + "\n" + VALID_HEAD), ""),
    ("nested-too-deep-json", raw("[" * 100_000, JSON), ""),
    ("nested-too-deep-yaml", raw("[" * 100_000), ""),
    ("unknown-apiVersion", as_yaml({**job(), "apiVersion": "kiban/v2"}), "apiVersion"),
    (
        "mpijob-unknown-implementation",
        raw(
            MPI_HEAD
            + f"spec: {{mpiImplementation: LAM, mpiReplicaSpecs: {{{MPI_LAUNCHER}, {MPI_WORKER}}}}}"
        ),
        "spec.mpiImplementation",
    ),
    (
        "mpijob-launcher-without-workers",
        raw(MPI_HEAD + f"spec: {{mpiReplicaSpecs: {{{MPI_LAUNCHER}}}}}"),
        "spec.mpiReplicaSpecs.Worker",
    ),
    (
        "missing-apiVersion",
        as_yaml({k: v for k, v in job().items() if k != "apiVersion"}),
        "apiVersion",
    ),
    ("unknown-kind", as_yaml({**job(), "kind": "Jobs"}), "kind"),
    ("unknown-top-level-field", as_yaml({**job(), "status": {}}), "status"),
    ("missing-metadata-name", as_yaml({**job(), "metadata": {}}), "metadata.name"),
    ("bad-metadata-name", as_yaml({**job(), "metadata": {"name": "My_Job"}}), "metadata.name"),
    (
        "misspelled-replicas",
        as_yaml(job(tasks=[{"replica": 2, "command": ["x"]}])),
        "spec.tasks[0].replica",
    ),
    ("misspelled-priorityClass", as_json(job(priorityclass="high")), "spec.priorityclass"),
    ("zero-replicas", as_yaml(job(tasks=task(replicas=0))), "spec.tasks[0].replicas"),
    ("negative-replicas", as_json(job(tasks=task(replicas=-3))), "spec.tasks[0].replicas"),
    ("text-replicas", as_yaml(job(tasks=task(replicas="two"))), "spec.tasks[0].replicas"),
    ("no-tasks", as_yaml(job(tasks=[])), "spec.tasks"),
    ("missing-tasks", as_yaml(job(tasks=None)), "spec.tasks"),
    ("missing-command", as_yaml(job(tasks=[{"replicas": 1}])), "spec.tasks[0].command"),
    ("empty-command", as_yaml(job(tasks=task(command=[]))), "spec.tasks[0].command"),
    # a NUL in what reaches exec: accepted, the launch failed and the job held its GPUs
    ("nul-in-env-value", as_json(job(tasks=task(env={"A": "x\x00y"}))), "spec.tasks[0].env"),
    ("nul-in-working-dir", as_json(job(workingDir="/tmp/x\x00")), "spec.workingDir"),
    (
        "negative-gpus",
        as_yaml(job(tasks=task(resources={"gpu": -1}))),
        "spec.tasks[0].resources.gpu",
    ),
    ("half-a-gpu", as_yaml(job(tasks=task(resources={"gpu": 0.5}))), "spec.tasks[0].resources.gpu"),
    (
        "more-gpus-than-any-node",
        as_yaml(job(tasks=task(resources={"gpu": 3}))),
        "spec.tasks[0].resources.gpu",
    ),
    (
        "second-task-too-big",
        as_yaml(
            job(
                tasks=[
                    {"name": "ps", "resources": {"gpu": 0}, "command": ["ps"]},
                    {"name": "worker", "resources": {"gpu": 8}, "command": ["w"]},
                ]
            )
        ),
        "spec.tasks[1].resources.gpu",
    ),
    (
        "more-memory-than-any-node",
        as_yaml(job(tasks=task(resources={"gpu": 1, "memory": "1Ti"}))),
        "spec.tasks[0].resources.memory",
    ),
    (
        "bad-memory-quantity",
        as_yaml(job(tasks=task(resources={"memory": "lots"}))),
        "spec.tasks[0].resources.memory",
    ),
    ("unknown-queue", as_yaml(job(queue="nonexistent")), "spec.queue"),
    ("bad-queue-name", as_yaml(job(queue="Not A Queue")), "spec.queue"),
    ("unknown-priorityClass", as_yaml(job(priorityClass="urgent")), "spec.priorityClass"),
    ("unknown-launcher", as_yaml(job(launcher="mpich")), "spec.launcher"),
    ("minAvailable-above-replicas", as_yaml(job(minAvailable=5)), "spec.minAvailable"),
    ("reserved-env", as_yaml(job(tasks=task(env={"RANK": "3"}))), "spec.tasks[0].env"),
    ("duplicate-task-names", as_yaml(job(tasks=task() + task())), "spec.tasks"),
    # Values YAML can write but JSON (the store) cannot hold.
    (
        "nan-env",
        raw(VALID_HEAD + "spec: {tasks: [{command: [x], env: {X: .nan}}]}"),
        "spec.tasks[0].env.X",
    ),
    (
        "nan-json",
        raw(
            '{"apiVersion": "kiban/v1", "kind": "Job", "metadata": {"name": "a"}, '
            '"spec": {"tasks": [{"command": ["x"], "env": {"X": NaN}}]}}',
            JSON,
        ),
        "spec.tasks[0].env.X",
    ),
    (
        "infinite-memory",
        raw(VALID_HEAD + "spec: {tasks: [{command: [x], resources: {memory: .inf}}]}"),
        "spec.tasks[0].resources.memory",
    ),
    (
        "infinite-cpu",
        raw(VALID_HEAD + "spec: {tasks: [{command: [x], resources: {cpu: -.inf}}]}"),
        "spec.tasks[0].resources.cpu",
    ),
    (
        "infinite-maxRuntime",
        raw(VALID_HEAD + "spec: {maxRuntime: .inf, tasks: [{command: [x]}]}"),
        "spec.maxRuntime",
    ),
    (
        "binary-label",
        raw(
            HEAD_NO_METADATA + "metadata: {name: a, labels: {team: !!binary aGVsbG8=}}\n" + ONE_TASK
        ),
        "metadata.labels.team",
    ),
    (
        "binary-env",
        raw(VALID_HEAD + "spec: {tasks: [{command: [x], env: {X: !!binary aGVsbG8=}}]}"),
        "spec.tasks[0].env.X",
    ),
    (
        "date-annotation",
        raw(
            HEAD_NO_METADATA + "metadata: {name: a, annotations: {since: 2024-01-01}}\n" + ONE_TASK
        ),
        "metadata.annotations.since",
    ),
]


def stored(platform: Platform) -> dict[str, int]:
    with platform.sessions() as session:
        return {
            model.__tablename__: session.scalar(select(func.count()).select_from(model)) or 0
            for model in (Job, Event, Queue, Tenant, ApiToken)
        }


# Quantities of the wrong type: each should be a 422 on its field.
QUANTITY_CASES = [
    pytest.param(
        raw(VALID_HEAD + "spec: {tasks: [{command: [x], resources: {cpu: null}}]}"),
        "spec.tasks[0].resources.cpu",
        id="null-cpu",
    ),
    pytest.param(
        raw(VALID_HEAD + "spec: {tasks: [{command: [x], resources: {memory: [4Gi]}}]}"),
        "spec.tasks[0].resources.memory",
        id="list-memory",
    ),
    pytest.param(
        raw(VALID_HEAD + "spec: {terminationGracePeriod: [30s], tasks: [{command: [x]}]}"),
        "spec.terminationGracePeriod",
        id="list-terminationGracePeriod",
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES] + QUANTITY_CASES,
)
def test_bad_manifest_is_422_naming_the_field_and_stores_nothing(
    api: TestClient, platform: Platform, body: tuple[bytes, str], expected: str
) -> None:
    api.post("/api/v1/jobs", json=job())  # something there already, to see it is left alone
    before = stored(platform)
    jobs_before = api.get("/api/v1/jobs").json()
    content, content_type = body

    response = api.post("/api/v1/jobs", content=content, headers={"Content-Type": content_type})

    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["status"] == 422
    assert [p["field"] for p in error["problems"]] == [expected], error
    assert all(p["message"] for p in error["problems"])
    assert error["message"].startswith("invalid input: ")
    if expected:
        assert expected in error["message"]
    assert stored(platform) == before
    assert api.get("/api/v1/jobs").json() == jobs_before


def test_the_valid_manifest_used_above_is_accepted(api: TestClient) -> None:
    # Guards the table: each bad case differs from an accepted one only where it says.
    for content, content_type in (as_json(job()), as_yaml(job())):
        response = api.post("/api/v1/jobs", content=content, headers={"Content-Type": content_type})
        assert response.status_code == 201, response.text


def test_several_problems_are_all_reported(api: TestClient, platform: Platform) -> None:
    document = job(tasks=[{"replica": 2, "resources": {"gpu": -1}}], priorityclass="x")
    before = stored(platform)
    response = api.post("/api/v1/jobs", json=document)
    assert response.status_code == 422
    fields = {p["field"] for p in response.json()["error"]["problems"]}
    assert fields == {
        "spec.priorityclass",
        "spec.tasks[0].replica",
        "spec.tasks[0].resources.gpu",
        "spec.tasks[0].command",
    }
    assert stored(platform) == before


# Bad requests to the other endpoints: a 4xx naming the field, never a 500 (on PostgreSQL in
# particular, which refuses NUL characters, over-long strings and out-of-range integers).
REQUESTS: list[tuple[str, str, dict[str, Any], int, str | None]] = [
    (
        "POST",
        "/api/v1/queues",
        {"json": {"name": "q", "tenant": "default", "quota": {"gpu": -1}}},
        422,
        "quota.gpu",
    ),
    (
        "POST",
        "/api/v1/queues",
        {"json": {"name": "q", "tenant": "default", "quota": {"gpu": 2**40}}},
        422,
        "quota.gpu",
    ),
    (
        "POST",
        "/api/v1/queues",
        {"json": {"name": "q", "tenant": "default", "quota": {"gpu": 2**70}}},
        422,
        "quota.gpu",
    ),
    (
        "POST",
        "/api/v1/queues",
        {"json": {"name": "q", "tenant": "default", "quota": {"cpu": 4}}},
        422,
        "quota.cpu",
    ),
    ("POST", "/api/v1/queues", {"json": {"name": "Q!", "tenant": "default"}}, 422, "name"),
    ("POST", "/api/v1/queues", {"json": {"name": "q", "tenant": "nobody"}}, 422, "tenant"),
    ("POST", "/api/v1/queues", {"json": {"name": "q", "tenant": "a\x00b"}}, 422, "tenant"),
    (
        "POST",
        "/api/v1/queues",
        {"json": {"name": "q", "tenant": "default", "strategy": "LIFO"}},
        422,
        "strategy",
    ),
    (
        "POST",
        "/api/v1/queues",
        {"json": {"name": "q", "tenant": "default", "colour": "red"}},
        422,
        "colour",
    ),
    ("POST", "/api/v1/queues", {"json": {"name": "default", "tenant": "default"}}, 409, None),
    ("POST", "/api/v1/tenants", {"json": {"name": "Team A"}}, 422, "name"),
    ("POST", "/api/v1/tenants", {"json": {"name": "a\x00b"}}, 422, "name"),
    ("POST", "/api/v1/tenants", {"json": {}}, 422, "name"),
    ("POST", "/api/v1/tenants", {"json": {"name": "default"}}, 409, None),
    ("POST", "/api/v1/tenants/default/tokens", {"json": {"name": "x" * 129}}, 422, "name"),
    ("POST", "/api/v1/tenants/default/tokens", {"json": {"name": "bob\x00"}}, 422, "name"),
    ("POST", "/api/v1/tenants/default/tokens", {"json": {"name": "  "}}, 422, "name"),
    ("POST", "/api/v1/tenants/nobody/tokens", {"json": {"name": "bob"}}, 404, None),
    ("POST", "/api/v1/tenants/a%00b/tokens", {"json": {"name": "bob"}}, 404, None),
    ("GET", "/api/v1/jobs", {"params": {"name": "a\x00b"}}, 422, "name"),
    ("GET", "/api/v1/jobs", {"params": {"queue": "a\x00b"}}, 422, "queue"),
    ("GET", "/api/v1/jobs", {"params": {"tenant": "a\x00b"}}, 422, "tenant"),
    ("GET", "/api/v1/jobs/a%00b", {}, 404, None),
    ("GET", "/api/v1/jobs/" + "a" * 5000, {}, 404, None),
    ("POST", "/api/v1/jobs/a%00b/cancel", {}, 404, None),
    ("GET", "/api/v1/jobs/{job}/events", {"params": {"after": 2**31}}, 422, "after"),
    ("GET", "/api/v1/jobs/{job}/events", {"params": {"after": -1}}, 422, "after"),
    ("GET", "/api/v1/jobs/{job}/logs", {"params": {"offset": 2**63}}, 422, "offset"),
    ("GET", "/api/v1/jobs/{job}/logs", {"params": {"offset": -1}}, 422, "offset"),
    ("GET", "/api/v1/jobs/{job}/logs", {"params": {"follow": "perhaps"}}, 422, "follow"),
]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "field"),
    REQUESTS,
    ids=[f"{r[0]} {r[1]} {r[3]} {r[4] or ''}".strip() for r in REQUESTS],
)
def test_bad_request_is_refused_cleanly(
    api: TestClient,
    platform: Platform,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    field: str | None,
) -> None:
    job_id = api.post("/api/v1/jobs", json=job()).json()["id"]
    before = stored(platform)
    response = api.request(method, path.format(job=job_id), **kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["status"] == status
    if field is not None:
        assert [p["field"] for p in error["problems"]] == [field], error
    assert stored(platform) == before
