"""The Job of one service replica: its name, labels, command and every field of the spec."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from kiban.domain.jobspec import DNS_LABEL, JobManifest
from kiban.domain.service import ServiceSpec
from kiban.domain.service_replica import (
    REVISION_LABEL,
    SERVICE_LABEL,
    replica_job_manifest,
    replica_job_name,
    replica_port,
)

GI = 2**30

HF = ServiceSpec(
    queue="research",
    priority_class="serving",
    runtime="huggingface",
    model_name="minilm",
    storage_uri="file:///models/minilm",
    task="text_embedding",
    args=["--dtype", "float32"],
    image="registry.example/kiban-serve:1",
    env={"HF_HOME": "/cache/hf"},
    volumes=[{"name": "cache", "claimName": "hf-cache", "mountPath": "/cache"}],  # type: ignore[list-item]
    resources={"gpu": 1, "cpu": "1500m", "memory": "3Gi"},  # type: ignore[arg-type]
    max_replicas=3,
    canary_traffic_percent=10,
)
CUSTOM = ServiceSpec(
    runtime="custom",
    model_name="echo",
    command=["python", "-m", "http.server"],
    args=["8000"],
    readiness_path="/",
    port=8000,
)


def replica(spec: ServiceSpec = HF, **kwargs: Any) -> JobManifest:
    given: dict[str, Any] = {"service": "embedder", "revision": "a1b2c3", "index": 0}
    return replica_job_manifest(spec=spec, **(given | kwargs))


def with_(spec: ServiceSpec, **fields: Any) -> ServiceSpec:
    by_alias = {ServiceSpec.model_fields[k].alias or k: v for k, v in fields.items()}
    return ServiceSpec.model_validate(spec.to_document() | by_alias)


def test_huggingface_replica_honours_every_field() -> None:
    job = replica(runtime_python="/venv/bin/python")
    assert job.metadata.name == "embedder-a1b2c3-0"
    assert job.metadata.labels == {SERVICE_LABEL: "embedder", REVISION_LABEL: "a1b2c3"}
    spec = job.spec
    assert (spec.queue, spec.priority_class, spec.restart_policy, spec.master_port) == (
        "research",
        "serving",
        "Never",  # the service controller replaces a replica that exits
        8080,
    )
    assert spec.max_runtime is None
    assert spec.launcher == "none"
    [task] = spec.tasks
    assert (task.name, task.replicas) == ("server", 1)
    assert task.command == [
        "/venv/bin/python", "-m", "kiban.serving.runtime",
        "--model_name", "minilm",
        "--storage_uri", "file:///models/minilm",
        "--task", "text_embedding",
        "--dtype", "float32",
    ]  # fmt: skip
    assert task.resources == HF.resources
    assert (task.resources.gpu, task.resources.cpu, task.resources.memory) == (1, 1500, 3 * GI)
    assert task.env == {"HF_HOME": "/cache/hf"}
    assert task.image == "registry.example/kiban-serve:1"
    assert task.volumes == HF.volumes
    assert replica_port(HF) is None


def test_the_manifest_round_trips_through_the_job_model() -> None:
    job = replica()
    document = job.model_dump(mode="json", by_alias=True)
    document["spec"]["tasks"][0]["resources"]["cpu"] = "1500m"  # a bare number reads as cores
    assert JobManifest.model_validate(document) == job


def test_model_id_instead_of_storage() -> None:
    spec = with_(HF, storage_uri=None, model_id="sentence-transformers/all-MiniLM-L6-v2")
    command = replica(spec).spec.tasks[0].command
    assert command[5:7] == ["--model_id", "sentence-transformers/all-MiniLM-L6-v2"]
    assert "--storage_uri" not in command


def test_pvc_model_mounts_its_claim_read_only() -> None:
    spec = with_(HF, storage_uri="pvc://model-store/minilm")
    task = replica(spec).spec.tasks[0]
    assert task.command[5:7] == ["--storage_uri", "pvc://model-store/minilm"]
    mounted = {v.claim_name: (v.name, v.mount_path, v.read_only) for v in task.volumes}
    assert mounted == {
        "hf-cache": ("cache", "/cache", False),
        "model-store": ("model", "/mnt/pvc/model-store", True),
    }


def test_pvc_model_already_mounted_is_not_mounted_again() -> None:
    spec = with_(
        HF,
        storage_uri="pvc://hf-cache/minilm",
        volumes=[{"name": "model", "claimName": "hf-cache", "mountPath": "/cache/"}],
    )
    task = replica(spec).spec.tasks[0]
    assert [v.claim_name for v in task.volumes] == ["hf-cache"]
    assert task.command[5:7] == ["--storage_uri", "file:///cache/minilm"]
    at_home = with_(
        spec, volumes=[{"name": "m", "claimName": "hf-cache", "mountPath": "/mnt/pvc/hf-cache"}]
    )
    task = replica(at_home).spec.tasks[0]
    assert len(task.volumes) == 1
    assert task.command[5:7] == ["--storage_uri", "pvc://hf-cache/minilm"]


def test_pvc_volume_name_avoids_the_users() -> None:
    spec = with_(
        HF,
        storage_uri="pvc://store",
        volumes=[{"name": "model", "claimName": "other", "mountPath": "/other"}],
    )
    names = [v.name for v in replica(spec).spec.tasks[0].volumes]
    assert names == ["model", "model-1"]


def test_custom_replica_runs_its_command_and_is_told_its_port() -> None:
    job = replica(CUSTOM, service="echo")
    [task] = job.spec.tasks
    assert task.command == ["python", "-m", "http.server", "8000"]
    assert task.env == {"PORT": "8000"}
    assert task.image is None
    assert (job.spec.queue, job.spec.priority_class) == ("default", None)
    assert replica_port(CUSTOM) == 8000
    without_port = with_(CUSTOM, port=None)
    assert replica(without_port).spec.tasks[0].env == {}
    assert replica_port(without_port) is None


def test_names_are_dns_labels_deterministic_and_distinct() -> None:
    services = ["embedder", "a", "a-b", "x" * 63, "llm-" + "y" * 59]
    revisions = ["a1b2c3", "b-c", "c", "0123456789abcdef", "r" * 40, "Rev_1.2"]
    indexes = [0, 1, 10, 99]
    names = {}
    for service, revision, index in itertools.product(services, revisions, indexes):
        name = replica_job_name(service, revision, index)
        assert DNS_LABEL.match(name), name
        assert name == replica_job_name(service, revision, index)
        assert name not in names, (name, names.get(name), (service, revision, index))
        names[name] = (service, revision, index)
    # The plain form when it is a label and unambiguous; a hash otherwise.
    assert replica_job_name("a-b", "c", 0) == "a-b-c-0"
    assert replica_job_name("chat", "chat-00002", 1) == "chat-00002-1"
    assert replica_job_name("chat", "00002", 1) != "chat-00002-1"
    assert replica_job_name("a", "b-c", 0) != "a-b-c-0"
    assert len(replica_job_name("x" * 63, "a1b2c3", 7)) == 63


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"service": "Bad_Name"}, "service name"),
        ({"revision": ""}, "revision"),
        ({"revision": "a/b"}, "revision"),
        ({"index": -1}, "must not be negative"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replica(**kwargs)
