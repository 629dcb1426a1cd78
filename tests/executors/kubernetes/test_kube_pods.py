"""Pod and Service manifests of a job attempt, and what pod statuses mean (no server)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kiban.domain.jobspec import JobSpec
from kiban.domain.service import ServiceSpec
from kiban.domain.service_replica import replica_job_manifest
from kiban.executors.base import LaunchError, LaunchRequest
from kiban.executors.kubernetes.options import KubernetesOptions
from kiban.executors.kubernetes.pods import (
    CREATE_SHOWN_AFTER_S,
    EXIT_CANNOT_START,
    PULL_DEADLINE_S,
    observe_pod,
    pod_manifest,
    service_manifest,
)
from kiban.scheduler.decisions import ReplicaPlacement

OPTIONS = KubernetesOptions()


def request(task: dict[str, Any] | None = None, **spec: Any) -> LaunchRequest:
    base = {"replicas": 2, "resources": {"gpu": 2}, "command": ["python", "train.py"]}
    base["image"] = "registry.example/train:1"
    base.update(task or {})
    job_spec = JobSpec.model_validate({"tasks": [base], **spec})
    gpus = job_spec.tasks[0].resources.gpu
    placements = tuple(
        ReplicaPlacement("worker", i, i, f"node-{i}", tuple(range(gpus)), 1500, 2**30)
        for i in range(job_spec.tasks[0].replicas)
    )
    return LaunchRequest("train-abc123", "train", "vision", 2, job_spec, placements, 29512)


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_a_replica_pod_is_bound_to_its_node_with_gpus_environment_and_tolerations() -> None:
    req = request()
    pod = pod_manifest(req, req.placements[1], "kiban-vision", OPTIONS)
    spec = pod["spec"]
    assert spec["nodeName"] == "node-1"
    assert spec["restartPolicy"] == "Never"
    assert (spec["hostname"], spec["subdomain"]) == ("kb-train-abc123-2-1", "kb-train-abc123-2")
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]
    assert spec["terminationGracePeriodSeconds"] == 30
    resources = spec["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "2"
    assert resources["requests"] == {"cpu": "1500m", "memory": str(2**30), "nvidia.com/gpu": "2"}
    variables = env(pod)
    assert variables["MASTER_ADDR"] == (
        "kb-train-abc123-2-0.kb-train-abc123-2.kiban-vision.svc.cluster.local"
    )
    assert (variables["MASTER_PORT"], variables["WORLD_SIZE"], variables["RANK"]) == (
        "29512",
        "2",
        "1",
    )
    assert variables["KIBAN_ATTEMPT"] == "2"
    assert "CUDA_VISIBLE_DEVICES" not in variables  # the device plugin chooses the devices
    assert "NVIDIA_VISIBLE_DEVICES" not in variables
    labels = pod["metadata"]["labels"]
    assert labels["kiban.dev/job"] == "train-abc123" and labels["kiban.dev/rank"] == "1"
    assert pod["metadata"]["annotations"]["kiban.dev/job-id"] == "train-abc123"
    assert "hostNetwork" not in spec and "volumes" not in spec


def test_a_one_replica_attempt_has_no_service_and_its_master_is_itself() -> None:
    req = request({"replicas": 1})
    pod = pod_manifest(req, req.placements[0], "kiban-vision", OPTIONS)
    assert "subdomain" not in pod["spec"]  # no headless Service is made for it
    variables = env(pod)
    assert (variables["MASTER_ADDR"], variables["WORLD_SIZE"], variables["RANK"]) == (
        "localhost",
        "1",
        "0",
    )


def test_a_replica_without_gpus_sees_none() -> None:
    req = request({"resources": {"gpu": 0}})
    pod = pod_manifest(req, req.placements[0], "ns", OPTIONS)
    assert env(pod)["NVIDIA_VISIBLE_DEVICES"] == "none"
    assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"]["limits"]


def test_container_fields_of_the_spec_reach_the_pod() -> None:
    req = request(
        {
            "args": ["--lr", "0.1"],
            "volumes": [
                {"name": "data", "claimName": "shared", "mountPath": "/data", "readOnly": True}
            ],
            "nodeSelector": {"nvidia.com/gpu.product": "H100"},
            "affinity": {"nodeAffinity": {}},
            "hostNetwork": True,
            "annotations": {"example.com/team": "vision"},
        },
        terminationGracePeriod="90s",
        launcher="torchrun",
    )
    pod = pod_manifest(req, req.placements[0], "ns", OPTIONS)
    spec = pod["spec"]
    container = spec["containers"][0]
    assert container["command"][:3] == ["python", "-m", "torch.distributed.run"]
    assert container["command"][-4:] == ["python", "train.py", "--lr", "0.1"]
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/data", "readOnly": True}]
    assert spec["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "shared", "readOnly": True}}
    ]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    assert spec["affinity"] == {"nodeAffinity": {}}
    assert (spec["hostNetwork"], spec["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert spec["terminationGracePeriodSeconds"] == 90
    assert pod["metadata"]["annotations"]["example.com/team"] == "vision"


MULTUS = "k8s.v1.cni.cncf.io/networks"
RDMA_TASK: dict[str, Any] = {
    "resources": {"gpu": 2, "nvidia.com/hostdev": 8, "hugepages-2Mi": "1Gi", "memory": "16Gi"},
    "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
    "volumes": [
        {"name": "shm", "mountPath": "/dev/shm", "emptyDir": {"medium": "Memory"}},
        {"name": "scratch", "mountPath": "/scratch", "emptyDir": {"sizeLimit": "10Gi"}},
        {"name": "data", "claimName": "shared", "mountPath": "/data"},
    ],
    "annotations": {MULTUS: "sriov-rdma-vf,sriov-rdma-vf"},
}


def test_the_rdma_fields_of_an_oke_job_reach_the_pod() -> None:
    req = request(RDMA_TASK)
    pod = pod_manifest(req, req.placements[0], "ns", OPTIONS)
    container = pod["spec"]["containers"][0]
    resources = container["resources"]
    for part in ("limits", "requests"):
        assert resources[part]["nvidia.com/hostdev"] == "8"
        assert resources[part]["hugepages-2Mi"] == str(2**30)
        assert resources[part]["nvidia.com/gpu"] == "2"
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert pod["spec"]["volumes"] == [
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "scratch", "emptyDir": {"sizeLimit": str(10 * 2**30)}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "shared", "readOnly": False}},
    ]
    assert {"name": "shm", "mountPath": "/dev/shm", "readOnly": False} in container["volumeMounts"]
    assert pod["metadata"]["annotations"][MULTUS] == "sriov-rdma-vf,sriov-rdma-vf"


def test_a_pod_without_extended_resources_asks_for_none() -> None:
    req = request()
    pod = pod_manifest(req, req.placements[0], "ns", OPTIONS)
    container = pod["spec"]["containers"][0]
    assert set(container["resources"]["limits"]) == {"memory", "nvidia.com/gpu"}
    assert "securityContext" not in container


def service_replica_request(spec: ServiceSpec) -> LaunchRequest:
    """The request the control plane makes for replica 0 of a service's revision."""
    job = replica_job_manifest(service="llm", revision="llm-00001", index=0, spec=spec)
    placement = ReplicaPlacement("server", 0, 0, "node-0", (0,), 1000, 2**30)
    return LaunchRequest(
        "llm-00001-0-abc",
        job.metadata.name,
        "vision",
        1,
        job.spec,
        (placement,),
        job.spec.master_port or 8080,
        labels=job.metadata.labels,
    )


HF_SERVICE = ServiceSpec(
    runtime="huggingface",
    model_name="llm",
    model_id="org/tiny-llm",
    image="registry.example/kiban-model-server:1",
)


def test_a_service_replica_is_asked_to_listen_on_every_address_of_its_pod() -> None:
    req = service_replica_request(HF_SERVICE)
    assert env(pod_manifest(req, req.placements[0], "ns", OPTIONS))["KIBAN_REPLICA_HOST"] == (
        "0.0.0.0"
    )
    custom = ServiceSpec(
        runtime="custom",
        model_name="echo",
        command=["python", "-m", "http.server"],
        image="registry.example/echo:1",
        port=8000,
    )
    req = service_replica_request(custom)
    assert env(pod_manifest(req, req.placements[0], "ns", OPTIONS))["KIBAN_REPLICA_HOST"] == (
        "0.0.0.0"
    )
    # A job that is no service's replica is not told.
    req = request()
    assert "KIBAN_REPLICA_HOST" not in env(pod_manifest(req, req.placements[0], "ns", OPTIONS))


def test_a_task_without_an_image_is_refused_naming_the_field() -> None:
    req = request({"image": None})
    with pytest.raises(LaunchError, match=r"spec\.tasks\[0\]\.image is required"):
        pod_manifest(req, req.placements[0], "ns", OPTIONS)
    default = KubernetesOptions(default_image="registry.example/base:1")
    pod = pod_manifest(req, req.placements[0], "ns", default)
    assert pod["spec"]["containers"][0]["image"] == "registry.example/base:1"


def test_the_service_is_headless_and_selects_the_attempt() -> None:
    service = service_manifest(request(), "kiban-vision")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {
        "kiban.dev/job": "train-abc123",
        "kiban.dev/attempt": "2",
    }


def pod_in(phase: str, **status: Any) -> dict[str, Any]:
    return {"spec": {"nodeName": "node-0"}, "status": {"phase": phase, **status}}


def terminated(code: int, reason: str = "Error") -> list[dict[str, Any]]:
    return [{"name": "main", "state": {"terminated": {"exitCode": code, "reason": reason}}}]


@pytest.mark.parametrize(
    ("pod", "running", "exit_code", "lost"),
    [
        (pod_in("Pending"), True, None, False),
        (pod_in("Running"), True, None, False),
        (pod_in("Succeeded"), False, 0, False),
        (pod_in("Succeeded", containerStatuses=terminated(0, "Completed")), False, 0, False),
        (pod_in("Failed", containerStatuses=terminated(3)), False, 3, False),
        (pod_in("Failed", reason="Evicted", containerStatuses=terminated(137)), False, None, True),
        (pod_in("Failed", reason="OutOfnvidia.com/gpu"), False, None, True),
        (pod_in("Unknown"), False, None, True),
        (None, False, None, True),
        (
            pod_in(
                "Pending",
                containerStatuses=[
                    {"name": "main", "state": {"waiting": {"reason": "InvalidImageName"}}}
                ],
            ),
            False,
            EXIT_CANNOT_START,
            False,
        ),
        (
            pod_in(
                "Pending",
                containerStatuses=[
                    {"name": "main", "state": {"waiting": {"reason": "ErrImagePull"}}}
                ],
            ),
            True,
            None,
            False,
        ),
    ],
)
def test_pod_status_maps_to_an_observation(
    pod: dict[str, Any] | None, running: bool, exit_code: int | None, lost: bool
) -> None:
    seen = observe_pod(pod)
    assert (seen.running, seen.exit_code, seen.lost) == (running, exit_code, lost)


def pulling_image(since: str) -> dict[str, Any]:
    """A pod made at ``since`` whose image the kubelet keeps failing to pull."""
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "train:9"'}
    pod = pod_in("Pending", containerStatuses=[{"name": "main", "state": {"waiting": waiting}}])
    pod["metadata"] = {"creationTimestamp": since}
    return pod


def test_an_image_not_pulled_by_the_deadline_ends_the_replica_as_one_that_cannot_start() -> None:
    made = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()
    pod = pulling_image("2026-11-25T12:00:00Z")
    waiting = observe_pod(pod, now=made + PULL_DEADLINE_S - 1)
    assert waiting.running
    why = 'ImagePullBackOff: Back-off pulling image "train:9"'
    assert waiting.message == f"waiting for its image: {why}"
    ended = observe_pod(pod, now=made + PULL_DEADLINE_S)
    assert (ended.running, ended.exit_code, ended.lost) == (False, EXIT_CANNOT_START, False)
    assert ended.message == f"container cannot start: its image was not pulled in 600 s: {why}"
    assert observe_pod(pod).running  # no clock: no deadline
    assert observe_pod(pulling_image("yesterday"), now=made + 10**6).running


def test_a_container_not_made_is_shown_after_a_while_and_ends_at_the_deadline() -> None:
    """A claim that does not exist keeps a pod in ContainerCreating, with no reason given."""
    made = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()
    waiting = {"reason": "ContainerCreating"}
    pod = pod_in("Pending", containerStatuses=[{"name": "main", "state": {"waiting": waiting}}])
    pod["metadata"] = {"creationTimestamp": "2026-11-25T12:00:00Z"}
    starting = observe_pod(pod, now=made + CREATE_SHOWN_AFTER_S - 1)
    assert (starting.running, starting.message) == (True, "")  # every start looks so at first
    stuck = "ContainerCreating (a volume that cannot be mounted keeps a pod there; see its events)"
    shown = observe_pod(pod, now=made + CREATE_SHOWN_AFTER_S)
    assert (shown.running, shown.message) == (True, f"waiting for its container: {stuck}")
    ended = observe_pod(pod, now=made + PULL_DEADLINE_S)
    assert (ended.running, ended.exit_code) == (False, EXIT_CANNOT_START)
    assert ended.message == f"container cannot start: its container was not made in 600 s: {stuck}"


def test_a_running_pod_on_a_node_that_is_gone_is_lost() -> None:
    seen = observe_pod(pod_in("Running"), node_present=False)
    assert seen.lost and "node-0 is gone" in seen.message
