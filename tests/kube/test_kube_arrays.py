"""A job array and a dependency on the Kubernetes executor: each index a pod with its
``KIBAN_ARRAY_*``, at most ``parallelism`` at once, and a job that starts only once every
index has succeeded (pods complete through KWOK's sim-duration stage)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kube_platform import empty_the_cluster, env_of, job_pods, kube_platform, manifest, state
from kube_support import eventually

from kiban.api.app import create_app
from kiban.devtools.kube import ControlPlane
from kiban.platform import Platform

pytestmark = pytest.mark.kube

SIM = {"kiban.dev/sim-duration": "2s"}


@pytest.fixture
def platform(control_plane: ControlPlane, core: Any, tmp_path: Path) -> Iterator[Platform]:
    empty_the_cluster(core)
    with kube_platform(control_plane, tmp_path / "home") as built:
        yield built
    empty_the_cluster(core)


@pytest.fixture
def api(platform: Platform) -> Iterator[TestClient]:
    token = (platform.home / "token").read_text().strip()
    with TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def submitted(api: TestClient, document: dict[str, Any]) -> str:
    answer = api.post("/api/v1/jobs", json=document)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def test_an_array_runs_as_pods_and_a_job_waits_for_all_of_it(
    platform: Platform, api: TestClient, core: Any
) -> None:
    document = manifest("sweep", gpu=1, annotations=SIM, array={"indices": "4-6", "parallelism": 2})
    array_id = submitted(api, document)
    after = submitted(
        api, manifest("gather", gpu=1, annotations=SIM, dependsOn=[{"job": array_id}])
    )
    first = eventually(
        lambda: (p := job_pods(core, f"{array_id}-4")) and p[0], what="index 4's pod"
    )
    env = env_of(first)
    assert (env["KIBAN_ARRAY_JOB_ID"], env["KIBAN_ARRAY_INDEX"]) == (array_id, "4")
    assert env["KIBAN_JOB_ID"] == f"{array_id}-4"
    held = api.get(f"/api/v1/jobs/{array_id}-6").json()
    assert held["state"] == "Pending"
    assert held["reason"]["code"] == "WaitingForArraySlot"
    waiting = api.get(f"/api/v1/jobs/{after}").json()
    assert waiting["reason"]["code"] == "WaitingForDependency"
    assert array_id in waiting["reason"]["message"]
    assert job_pods(core, after) == []

    last = eventually(
        lambda: (p := job_pods(core, f"{array_id}-6")) and p[0], what="index 6", timeout=30
    )
    assert env_of(last)["KIBAN_ARRAY_INDEX"] == "6"
    eventually(lambda: state(platform, after) == "Succeeded", what="gather to succeed", timeout=60)
    counts = api.get(f"/api/v1/arrays/{array_id}").json()["counts"]
    assert counts == {"Succeeded": 3}
    gather = api.get(f"/api/v1/jobs/{after}").json()
    ended = [api.get(f"/api/v1/jobs/{array_id}-{i}").json()["finishedAt"] for i in (4, 5, 6)]
    assert gather["startedAt"] >= max(ended)
