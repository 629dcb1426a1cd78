"""The Kubernetes executor under the real control loop, against the real API server and KWOK:
three fake 2-GPU nodes (see conftest.NODE_SPEC)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_platform import (
    NAMESPACE,
    empty_the_cluster,
    env_of,
    events,
    get,
    job_pods,
    kube_platform,
    manifest,
    node_row,
    state,
    submit,
)
from kube_support import eventually, pod_body, unique
from kubernetes.client.exceptions import ApiException
from sqlalchemy import select

from kiban.devtools.kube import ControlPlane
from kiban.platform import Platform
from kiban.services import jobs
from kiban.services.auth import authenticate
from kiban.store.models import Replica
from kiban.testing.platform_jobs import ADMIN

pytestmark = pytest.mark.kube

NODES = ["kwok-node-0000", "kwok-node-0001", "kwok-node-0002"]


@pytest.fixture
def clean(core: Any) -> Iterator[None]:
    empty_the_cluster(core)
    yield
    empty_the_cluster(core)


@pytest.fixture
def platform(
    control_plane: ControlPlane, core: Any, clean: None, tmp_path: Path
) -> Iterator[Platform]:
    with kube_platform(control_plane, tmp_path / "home") as built:
        yield built


job = manifest


def running_pods(core: Any, job_id: str, count: int) -> list[Any]:
    return eventually(
        lambda: (
            (p := job_pods(core, job_id))
            and len(p) == count
            and all(x.status.phase == "Running" for x in p)
            and p
        ),
        what=f"{count} running pods of {job_id}",
    )


def test_pytorch_job_runs_as_pods_with_the_environment_and_succeeds(
    platform: Platform, core: Any
) -> None:
    document = job(
        "ddp", replicas=3, gpu=2, launcher="torchrun", annotations={"kiban.dev/sim-duration": "3s"}
    )
    task = document["spec"]["tasks"][0]
    task.update(
        image="registry.example/pytorch:2.5",
        command=["train.py"],
        args=["--epochs", "1"],
        env={"NCCL_DEBUG": "INFO"},
        volumes=[{"name": "data", "claimName": "shared-data", "mountPath": "/data"}],
    )
    job_id = submit(platform, document)
    pods = running_pods(core, job_id, 3)
    # the loop sees the pods run on its next pass over the pod cache, a tick or two after
    eventually(lambda: state(platform, job_id) == "Running", what=f"{job_id} running", timeout=10)

    assert sorted(p.spec.node_name for p in pods) == NODES  # one 2-GPU node each
    service = core.read_namespaced_service(pods[0].spec.subdomain, NAMESPACE)
    assert service.spec.cluster_ip == "None"
    master = f"{pods[0].metadata.name}.{service.metadata.name}.{NAMESPACE}.svc.cluster.local"
    for rank, pod in enumerate(pods):
        assert pod.metadata.namespace == NAMESPACE
        env = env_of(pod)
        assert env["MASTER_ADDR"] == master
        assert (env["WORLD_SIZE"], env["RANK"], env["KIBAN_JOB_ID"]) == ("3", str(rank), job_id)
        assert env["MASTER_PORT"] == str(get(platform, job_id).master_port)
        assert env["NCCL_DEBUG"] == "INFO"
        assert "CUDA_VISIBLE_DEVICES" not in env and "NVIDIA_VISIBLE_DEVICES" not in env
        container = pod.spec.containers[0]
        assert container.image == "registry.example/pytorch:2.5"
        assert container.command[-3:] == ["train.py", "--epochs", "1"]
        assert f"--node_rank={rank}" in container.command and "--nnodes=3" in container.command
        assert container.resources.limits["nvidia.com/gpu"] == "2"
        assert [(m.name, m.mount_path) for m in container.volume_mounts] == [("data", "/data")]
        assert pod.spec.volumes[0].persistent_volume_claim.claim_name == "shared-data"
        assert any(
            t.key == "nvidia.com/gpu" and t.operator == "Exists" for t in pod.spec.tolerations
        )
        assert (pod.spec.hostname, pod.spec.subdomain) == (pod.metadata.name, service.metadata.name)
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid) == (
            "Service",
            service.metadata.name,
            service.metadata.uid,
        )
        assert pod.spec.restart_policy == "Never"

    eventually(
        lambda: state(platform, job_id) == "Succeeded", what="the job to succeed", timeout=30
    )
    eventually(lambda: not job_pods(core, job_id), what="its pods and Service to be deleted")
    assert not core.list_namespaced_service(
        NAMESPACE, label_selector=f"kiban.dev/job={job_id}"
    ).items


def test_a_replica_without_gpus_sees_none(platform: Platform, core: Any) -> None:
    job_id = submit(platform, job("cpu-only", gpu=0))
    (pod,) = running_pods(core, job_id, 1)
    assert env_of(pod)["NVIDIA_VISIBLE_DEVICES"] == "none"
    assert "nvidia.com/gpu" not in (pod.spec.containers[0].resources.limits or {})


def test_a_failed_pod_fails_the_job(platform: Platform, core: Any) -> None:
    job_id = submit(
        platform,
        job(
            "crash",
            replicas=2,
            annotations={"kiban.dev/sim-exit-code": "3", "kiban.dev/sim-duration": "1s"},
        ),
    )
    eventually(lambda: state(platform, job_id) == "Failed", what="the job to fail", timeout=30)
    assert "exited with code 3" in (get(platform, job_id).message or "")
    eventually(lambda: not job_pods(core, job_id), what="its pods to be deleted")


def test_gang_waits_for_gpus_held_by_foreign_pods_then_starts_whole(
    platform: Platform, core: Any
) -> None:
    foreign = unique("foreign")
    core.create_namespaced_pod("default", pod_body(foreign, NODES[0], gpus=2))
    try:
        eventually(
            lambda: node_row(platform, NODES[0]).gpus_used_elsewhere == 2,
            what="the foreign pod's GPUs to be seen",
        )
        job_id = submit(platform, job("gang", replicas=3, gpu=2))
        eventually(lambda: get(platform, job_id).reason_code is not None, what="a reason to wait")
        assert state(platform, job_id) == "Pending"
        assert job_pods(core, job_id) == []  # all or nothing: not two of three
    finally:
        core.delete_namespaced_pod(foreign, "default", grace_period_seconds=0)
    pods = running_pods(core, job_id, 3)
    assert sorted(p.spec.node_name for p in pods) == NODES


def test_preemption_deletes_the_victims_pods(platform: Platform, core: Any) -> None:
    low = submit(platform, job("low", replicas=3, priorityClass="low"))
    low_pods = running_pods(core, low, 3)
    high = submit(platform, job("high", replicas=1, priorityClass="high"))
    running_pods(core, high, 1)
    eventually(lambda: state(platform, high) == "Running", what="the preemptor to run")
    remaining = {p.metadata.uid for p in job_pods(core, low, attempt=1)}
    assert not remaining & {p.metadata.uid for p in low_pods}
    eventually(lambda: state(platform, low) == "Pending", what="the victim to wait again")
    assert "Preempted" in [reason for reason, _ in events(platform, low)]


def test_cordoned_or_sick_nodes_get_nothing_new_and_sick_ones_are_emptied(
    platform: Platform, core: Any
) -> None:
    victim = submit(platform, job("on-sick", replicas=1))
    (pod,) = running_pods(core, victim, 1)
    sick = pod.spec.node_name
    cordoned = next(n for n in NODES if n != sick)
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    _set_condition(core, sick, "True")
    try:
        eventually(lambda: not node_row(platform, sick).healthy, what="the sick node to be seen")
        eventually(
            lambda: get(platform, victim).attempt == 2, what="the sick node's job to be requeued"
        )
        sick_row = node_row(platform, sick)
        assert "GpuEcc=True (DBE on GPU 1)" in sick_row.health_message
        assert "cordoned" in node_row(platform, cordoned).unschedulable_reason
        (moved,) = running_pods(core, victim, 1)
        assert moved.spec.node_name not in (sick, cordoned)  # the one node left
        assert "Requeued" in [reason for reason, _ in events(platform, victim)]

        others = [submit(platform, job(f"new-{i}", replicas=1)) for i in range(2)]
        for other in others:
            eventually(lambda o=other: get(platform, o).reason_code, what="a reason to wait")
            assert job_pods(core, other) == []
    finally:
        core.patch_node(cordoned, {"spec": {"unschedulable": False}})
        _set_condition(core, sick, "False")
    healed = {p.spec.node_name for o in others for p in running_pods(core, o, 1)}
    assert healed == {sick, cordoned}


def test_a_restart_of_kiban_adopts_its_pods_without_duplicates(
    control_plane: ControlPlane, core: Any, clean: None, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    with kube_platform(control_plane, home) as first:
        job_id = submit(first, job("long", replicas=3))
        before = {p.metadata.uid for p in running_pods(core, job_id, 3)}
    assert {p.metadata.uid for p in job_pods(core, job_id)} == before  # kiban's exit leaves them
    with kube_platform(control_plane, home) as second:
        passes = second.loop.passes
        eventually(lambda: second.loop.passes > passes + 10, what="a few passes")
        assert state(second, job_id) == "Running"
        assert {p.metadata.uid for p in job_pods(core, job_id)} == before
        # A pod deleted behind kiban's back: the replica is lost, the job goes back to its queue
        # and starts again as a new attempt.
        victim = job_pods(core, job_id)[1]
        core.delete_namespaced_pod(
            victim.metadata.name, victim.metadata.namespace, grace_period_seconds=0
        )
        eventually(
            lambda: get(second, job_id).attempt == 2 and state(second, job_id) == "Running",
            what="a new attempt",
            timeout=30,
        )
        pods = running_pods(core, job_id, 3)
        assert all(p.metadata.labels["kiban.dev/attempt"] == "2" for p in pods)
        assert "a replica was lost" in " ".join(m for _, m in events(second, job_id))


def test_a_restart_removes_the_pods_of_attempts_no_longer_active(
    control_plane: ControlPlane, core: Any, clean: None, tmp_path: Path
) -> None:
    """kiban stopped after a job's end was recorded and before its pods were deleted."""
    home = tmp_path / "home"
    with kube_platform(control_plane, home) as first:
        job_id = submit(first, job("left", replicas=2, gpu=1))
        running_pods(core, job_id, 2)
        first.loop.stop()
        with first.sessions() as session:  # its end recorded; no stop reached the cluster
            for replica in session.scalars(select(Replica).where(Replica.job_id == job_id)):
                replica.active = False
            session.commit()
    stranger = pod_body(unique("stranger"), NODES[2])
    stranger["metadata"]["labels"] = {
        "app.kubernetes.io/managed-by": "kiban",
        "kiban.dev/job": "someone-else",
        "kiban.dev/attempt": "1",
    }
    stranger["metadata"]["annotations"] = {"kiban.dev/job-id": "someone-else"}
    core.create_namespaced_pod(NAMESPACE, stranger)
    assert len(job_pods(core, job_id)) == 2
    with kube_platform(control_plane, home):
        eventually(
            lambda: not job_pods(core, job_id), what="the left pods to be deleted", timeout=30
        )
        # a pod of a job this store does not know: another kiban's, perhaps
        assert core.read_namespaced_pod(stranger["metadata"]["name"], NAMESPACE)


def _set_condition(core: Any, node: str, status: str) -> None:
    condition = {
        "type": "GpuEcc",
        "status": status,
        "reason": "EccErrors",
        "message": "DBE on GPU 1",
    }
    core.patch_node_status(node, {"status": {"conditions": [condition]}})


def test_a_pod_lost_with_its_node_sends_the_job_back_to_its_queue(
    platform: Platform, core: Any
) -> None:
    job_id = submit(platform, job("orphaned", replicas=1))
    (pod,) = running_pods(core, job_id, 1)
    gone = core.read_node(pod.spec.node_name)
    core.delete_node(gone.metadata.name)
    try:
        eventually(lambda: get(platform, job_id).attempt == 2, what="a new attempt")
        (moved,) = running_pods(core, job_id, 1)
        assert moved.spec.node_name != gone.metadata.name
        assert "a replica was lost" in " ".join(m for _, m in events(platform, job_id))
    finally:
        body = core.api_client.sanitize_for_serialization(gone)
        body["metadata"] = {
            k: body["metadata"][k]
            for k in ("name", "labels", "annotations")
            if k in body["metadata"]
        }
        status = body.get("status") or {}
        body["status"] = {k: status[k] for k in ("capacity", "allocatable") if k in status}
        core.create_node(body)
        eventually(
            lambda: (
                (back := core.read_node(gone.metadata.name)).status.allocatable["nvidia.com/gpu"]
                == "2"
                and any(
                    c.type == "Ready" and c.status == "True" for c in back.status.conditions or []
                )
            ),
            what="the node to be Ready again, with its GPUs",
        )


def test_pods_go_to_the_nodes_their_selector_and_node_affinity_name(
    platform: Platform, core: Any
) -> None:
    """kiban binds the pods itself, so it must choose as a kubelet would admit them."""
    pinned = job("pinned", gpu=1)
    pinned["spec"]["tasks"][0]["nodeSelector"] = {"kubernetes.io/hostname": NODES[2]}
    steered = job("steered", gpu=1)
    steered["spec"]["tasks"][0]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "NotIn", "values": [NODES[0]]}
                        ],
                        "matchExpressions": [{"key": "kiban.dev/pool", "operator": "Exists"}],
                    }
                ]
            }
        }
    }
    pinned_id = submit(platform, pinned)
    (pod,) = running_pods(core, pinned_id, 1)
    assert pod.spec.node_name == NODES[2]  # best fit alone would take kwok-node-0000
    assert pod.spec.node_selector == {"kubernetes.io/hostname": NODES[2]}
    steered_id = submit(platform, steered)
    (pod,) = running_pods(core, steered_id, 1)
    assert pod.spec.node_name == NODES[2]  # best fit of the nodes it admits (one GPU left)
    assert pod.spec.affinity.node_affinity is not None
    preferring = job("preferring", gpu=1)
    on_node_1 = {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODES[1]]}
    preferring["spec"]["tasks"][0]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {"matchExpressions": [on_node_1]},
                }
            ]
        }
    }
    (pod,) = running_pods(core, submit(platform, preferring), 1)
    assert pod.spec.node_name == NODES[1]  # best fit alone would take kwok-node-0002's last GPU


def test_pods_are_told_the_api_and_their_jobs_own_token(platform: Platform, core: Any) -> None:
    platform.loop.launcher.api_url = "http://kiban.kiban-system.svc:8470"
    job_id = submit(platform, job("told", gpu=1))
    (pod,) = running_pods(core, job_id, 1)
    env = env_of(pod, core)
    assert env["KIBAN_URL"] == "http://kiban.kiban-system.svc:8470"
    with platform.sessions() as session:
        assert authenticate(session, f"Bearer {env['KIBAN_TOKEN']}").job_id == job_id
    # the token is in the attempt's Secret, never a value in the pod (readable by get pods)
    assert env["KIBAN_TOKEN"] not in json.dumps(core.api_client.sanitize_for_serialization(pod))
    [entry] = [e for e in pod.spec.containers[0].env if e.name == "KIBAN_TOKEN"]
    secret = entry.value_from.secret_key_ref.name
    with platform.sessions() as session:
        jobs.cancel(session, ADMIN, job_id, platform.clock.now())
        session.commit()
    platform.loop.wake()
    eventually(lambda: not secret_exists(core, secret), what=f"Secret {secret} deleted")


def secret_exists(core: Any, name: str) -> bool:
    try:
        core.read_namespaced_secret(name, NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
