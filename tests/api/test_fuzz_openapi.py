"""The API answers as its OpenAPI document says: Schemathesis fuzzes every operation under
``/api/v1`` (issue 21: no 5xx, no undeclared status, no answer outside its schema, no
schema-valid request refused as invalid and no schema-violating one accepted).

Each operation gets ``KIBAN_FUZZ_EXAMPLES`` generated requests (default 6) of each kind,
schema-valid and schema-violating, sent with no token, a member's, a running job's own token and
the admin's, against the app in-process over a platform on the fake executor. Generation is
derandomized, so a run is repeatable; for a long run by hand:
``KIBAN_FUZZ_EXAMPLES=300 pytest tests/api/test_fuzz_openapi.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from fuzz_support import (
    CONFIG,
    Caller,
    Known,
    call_as_each,
    checks_for,
    fuzz,
    operations,
    use_known,
    violable,
)
from schemathesis import GenerationMode

from kiban.api.app import create_app
from kiban.executors.base import NodeInfo
from kiban.platform import Platform, build_platform
from kiban.testing import FakeExecutor, ManualClock

FUZZ_EXAMPLES = int(os.environ.get("KIBAN_FUZZ_EXAMPLES", "6"))

DOCUMENT = create_app(cast(Platform, None)).openapi()  # the routes need no platform to be listed
OPERATIONS = operations(DOCUMENT)


def job(name: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "queue": queue,
            "tasks": [{"replicas": 1, "resources": {"gpu": 1}, "command": ["python", "t.py"]}],
        },
    }


def service(name: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"queue": queue, "model": {"name": "m", "storageUri": "file:///m"}},
    }


@dataclass
class World:
    app: FastAPI
    callers: list[Caller]
    known: Known


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Tenants vision (member alice) and speech, each with a queue, jobs (one running with its
    own token, one finished) and a service; the admin's token."""
    tmp = tmp_path_factory.mktemp("fuzz")
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
    admin = (platform.home / "token").read_text().strip()
    known = Known()
    with TestClient(app, headers={"Authorization": f"Bearer {admin}"}) as api:
        tokens, jobs = {}, []
        for tenant in ("vision", "speech"):
            assert api.post("/api/v1/tenants", json={"name": tenant}).status_code == 201
            queue = {"name": f"{tenant}-q", "tenant": tenant, "quota": {"gpu": 2}}
            assert api.post("/api/v1/queues", json=queue).status_code == 201
            made = api.post(f"/api/v1/tenants/{tenant}/tokens", json={"name": f"{tenant}-member"})
            tokens[tenant] = made.json()["token"]
            for name in ("train", "done"):
                answer = api.post("/api/v1/jobs", json=job(f"{tenant}-{name}", f"{tenant}-q"))
                assert answer.status_code == 201, answer.text
                jobs.append(answer.json()["id"])
            applied = api.post("/api/v1/services", json=service(f"{tenant}-svc", f"{tenant}-q"))
            assert applied.status_code == 201, applied.text
        platform.loop.run_once()
        vision_train, vision_done = jobs[0], jobs[1]
        executor.finish(vision_done, 0, 0)
        platform.loop.run_once()
        running = {j["id"] for j in api.get("/api/v1/jobs", params={"state": "Running"}).json()}
        assert vision_train in running
        (launch,) = [r for r in executor.launches if r.job_id == vision_train]
        job_token = dict(launch.api_env)["KIBAN_TOKEN"]
    known.running_jobs = running
    known.by_parameter = {
        ("jobs", "job_id"): jobs,
        ("services", "name"): ["vision-svc", "speech-svc"],
        ("nodes", "name"): ["node-0", "node-1"],
        ("tenants", "tenant"): ["vision", "speech", "default"],
    }
    callers = [  # the admin last: what it changes the others have already tried
        Caller("no token", None),
        Caller("a member of vision", tokens["vision"]),
        Caller(f"job {vision_train}'s own token", job_token),
        Caller("the admin", admin),
    ]
    yield World(app, callers, known)
    platform.close()


@pytest.fixture(scope="module")
def api_schema(world: World) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", world.app, config=CONFIG)


CASES = [
    pytest.param(method, path, mode, id=f"{mode.value}-{method} {path}")
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    for method, path in OPERATIONS
    if mode is GenerationMode.POSITIVE or violable(DOCUMENT, method, path)
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_every_answer_is_declared_and_matches_its_schema(
    api_schema: Any, world: World, method: str, path: str, mode: GenerationMode
) -> None:
    checks = checks_for(method, path)

    def send(case: Any, draw: Any) -> None:
        use_known(case, draw, world.known)
        call_as_each(case, world.callers, checks)

    fuzz(api_schema[path][method], mode, FUZZ_EXAMPLES, send)
