"""The services API: apply (kiban Service or KServe InferenceService, JSON or YAML), read, the
tenant boundary, bad manifests, promote and rollback refusals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.executors.base import Capability
from kiban.platform import Platform

INFERENCE_SERVICE = """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: llm
  annotations: {serving.kserve.io/deploymentMode: RawDeployment}
spec:
  predictor:
    minReplicas: 1
    maxReplicas: 2
    model:
      modelFormat: {name: huggingface}
      args: [--model_name=llm, --model_id=org/llm]
      resources: {limits: {nvidia.com/gpu: "1"}}
"""


def service(name: str = "embedder", queue: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"queue": queue, "model": {"name": "m", "storageUri": "file:///m"}, **spec},
    }


@pytest.fixture
def member(api: TestClient, platform: Platform) -> Iterator[TestClient]:
    """Alice, of tenant vision (queue vision-q)."""
    assert api.post("/api/v1/tenants", json={"name": "vision"}).status_code == 201
    queue = {"name": "vision-q", "tenant": "vision", "quota": {"gpu": 2}}
    assert api.post("/api/v1/queues", json=queue).status_code == 201
    token = api.post("/api/v1/tenants/vision/tokens", json={"name": "alice"}).json()["token"]
    with TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def test_apply_creates_then_changes_and_reports_ignored_kserve_fields(api: TestClient) -> None:
    created = api.post(
        "/api/v1/services", content=INFERENCE_SERVICE, headers={"Content-Type": "application/yaml"}
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["name"], body["tenant"], body["model"], body["state"]) == (
        "llm",
        "default",
        "llm",
        "Loading",
    )
    assert [r["name"] for r in body["revisions"]] == ["llm-00001"]
    assert body["task"] == "auto"  # no --task: as the model's configuration says
    assert any("deploymentMode" in w for w in body["warnings"])
    again = api.post(
        "/api/v1/services",
        content=INFERENCE_SERVICE.replace("maxReplicas: 2", "maxReplicas: 3"),
        headers={"Content-Type": "application/yaml"},
    )
    assert again.status_code == 200
    assert [r["name"] for r in again.json()["revisions"]] == ["llm-00001"]  # scaling only
    assert api.get("/api/v1/services/llm").json()["maxReplicas"] == 3
    embedder = INFERENCE_SERVICE.replace(
        "--model_id=org/llm]", "--model_id=org/e, --task=text_embedding]"
    )
    answer = api.post(
        "/api/v1/services", content=embedder, headers={"Content-Type": "application/yaml"}
    )
    assert answer.json()["task"] == "text_embedding"  # the dashboard offers embeddings only
    reasons = [e["reason"] for e in api.get("/api/v1/services/llm/events").json()]
    assert reasons[:2] == ["Created", "AppliedWithWarnings"]


def test_bad_manifests_name_the_field_and_store_nothing(api: TestClient) -> None:
    bad = service(minReplicas=3, maxReplicas=2)
    answer = api.post("/api/v1/services", json=bad)
    assert answer.status_code == 422
    assert "maxReplicas" in answer.text
    unknown = service(replicas=2)
    answer = api.post("/api/v1/services", json=unknown)
    assert answer.status_code == 422
    assert "spec.replicas" in answer.text
    job = {"apiVersion": "kiban/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}}
    assert "kiban submit" in api.post("/api/v1/services", json=job).text
    assert api.get("/api/v1/services").json() == []


def test_tenants_see_and_change_only_their_own_services(
    api: TestClient, member: TestClient
) -> None:
    assert api.post("/api/v1/services", json=service("admins")).status_code == 201
    mine = member.post("/api/v1/services", json=service("mine", queue="vision-q"))
    assert mine.status_code == 201, mine.text
    assert [s["name"] for s in member.get("/api/v1/services").json()] == ["mine"]
    assert member.get("/api/v1/services/admins").status_code == 404
    assert member.post("/api/v1/services/admins/promote").status_code == 404
    assert member.delete("/api/v1/services/admins").status_code == 404
    # A member cannot put a service in another tenant's queue either.
    assert member.post("/api/v1/services", json=service("x", queue="default")).status_code == 422
    assert {s["name"] for s in api.get("/api/v1/services").json()} == {"admins", "mine"}


def test_promote_and_rollback_refuse_what_cannot_be_done(api: TestClient) -> None:
    api.post("/api/v1/services", json=service())
    loading = api.post("/api/v1/services/embedder/promote")
    assert loading.status_code == 409
    assert "not Ready" in loading.text
    assert api.post("/api/v1/services/embedder/rollback").status_code == 409
    assert api.get("/api/v1/services/nope").status_code == 404


def test_describe_shows_the_autoscalers_numbers_and_cpu_warnings(
    api: TestClient, platform: Platform
) -> None:
    applied = api.post("/api/v1/services", json=service(scaleMetric="cpu", minReplicas=0))
    assert applied.status_code == 201, applied.text
    assert any("one replica is kept" in w for w in applied.json()["warnings"])
    assert applied.json()["revisions"][0]["scaling"] is None  # not decided yet
    platform.services.run_once()
    (revision,) = api.get("/api/v1/services/embedder").json()["revisions"]
    scaling = revision["scaling"]
    assert (scaling["metric"], scaling["perReplica"], scaling["desiredReplicas"]) == ("cpu", 0.8, 1)
    assert "no CPU reading yet" in scaling["note"]  # no replica has answered its probe


def test_apply_warns_of_unknown_runtime_args_and_fields_a_local_executor_ignores(
    api: TestClient, platform: Platform
) -> None:
    platform.executor.capabilities -= {Capability.CONTAINERS}  # runs replicas as processes
    platform.refresh_facts()
    manifest = INFERENCE_SERVICE.replace(
        "args: [--model_name=llm, --model_id=org/llm]",
        "image: registry.example/hf:v1\n      "
        "args: [--model_name=llm, --model_id=org/llm, --max_model_len=4096, --backend=vllm]",
    )
    applied = api.post(
        "/api/v1/services", content=manifest, headers={"Content-Type": "application/yaml"}
    )
    assert applied.status_code == 201, applied.text
    warnings = applied.json()["warnings"]
    assert (
        "spec.predictor.model.args[3]: ignored (--backend is not an option of kiban's "
        "huggingface runtime)"
    ) in warnings
    assert (
        "the local executor runs each replica as a local process and ignores container-only "
        "fields: spec.predictor.model.image"
    ) in warnings
    assert not any("max_model_len" in w for w in warnings)  # --max_length's alias
    events = api.get("/api/v1/services/llm/events").json()
    (recorded,) = [e["message"] for e in events if e["reason"] == "AppliedWithWarnings"]
    assert "spec.predictor.model.args[3]" in recorded and "spec.predictor.model.image" in recorded
