"""Extended resources on the real control plane: KWOK nodes advertising ``nvidia.com/hostdev: 8``
are discovered from their allocatable, a queue's quota of them holds, replicas are placed only
on those nodes and their pods ask for the devices in their limits; the OKE-style RDMA pod fields
(IPC_LOCK, /dev/shm in memory, the Multus annotation) are on the pods made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_platform import (
    empty_the_cluster,
    get,
    job_pods,
    kube_platform,
    manifest,
    node_row,
    submit,
)
from kube_support import eventually

from kiban.devtools.kube import ControlPlane, FakeNodeSpec
from kiban.platform import Platform
from kiban.services import policy
from kiban.testing.platform_jobs import ADMIN

pytestmark = pytest.mark.kube

HOSTDEV = "nvidia.com/hostdev"
MULTUS = "k8s.v1.cni.cncf.io/networks"
RDMA_NODES = FakeNodeSpec(count=2, gpus=8, name_prefix="rdma-node-", labels={"rdma": "yes"})
POLICY = {
    "queues": [{"name": "default", "quota": {"gpu": 64, HOSTDEV: 16}, "strategy": "BestEffortFIFO"}]
}


@pytest.fixture
def rdma_nodes(core: Any) -> Iterator[list[str]]:
    """Two KWOK nodes with 8 GPUs and 8 RDMA virtual functions each (removed afterwards: the
    tier's other tests expect its three 2-GPU nodes alone)."""
    names = []
    for i in range(RDMA_NODES.count):
        body = RDMA_NODES.node(i)
        for part in ("capacity", "allocatable"):
            body["status"][part][HOSTDEV] = "8"
        core.create_node(body)
        names.append(body["metadata"]["name"])
    try:
        yield names
    finally:
        for name in names:
            core.delete_node(name)


@pytest.fixture
def platform(
    control_plane: ControlPlane, core: Any, tmp_path: Path, rdma_nodes: list[str]
) -> Iterator[Platform]:
    empty_the_cluster(core)
    with kube_platform(control_plane, tmp_path / "home") as built:
        eventually(
            lambda: all(_known(built, n) for n in rdma_nodes), what="the RDMA nodes registered"
        )
        with built.sessions() as session:
            policy.change_policy(session, ADMIN, POLICY, at=built.clock.now())
            session.commit()
        built.policy_changed()
        yield built
    empty_the_cluster(core)


def _known(platform: Platform, name: str) -> bool:
    try:
        return bool(node_row(platform, name).extended)
    except AssertionError:
        return False


def rdma_job(name: str, replicas: int, **task: Any) -> dict[str, Any]:
    document = manifest(name, replicas=replicas, gpu=1)
    one = document["spec"]["tasks"][0]
    one["resources"] = {"gpu": 1, HOSTDEV: 8}
    one["annotations"] = {"kiban.dev/sim-duration": "1h"}
    one.update(task)
    return document


def running_pods(core: Any, job_id: str, count: int) -> list[Any] | None:
    """The job's pods once ``count`` of them run (None before)."""
    pods = job_pods(core, job_id)
    running = len(pods) == count and all(p.status.phase == "Running" for p in pods)
    return pods if running else None


def test_discovery_quota_placement_and_pod_limits(
    platform: Platform, core: Any, rdma_nodes: list[str]
) -> None:
    for name in rdma_nodes:
        assert node_row(platform, name).extended == {HOSTDEV: 8}
    assert node_row(platform, "kwok-node-0000").extended == {}

    pair = submit(platform, rdma_job("pair", 2))
    pods = eventually(lambda: running_pods(core, pair, 2), what="2 running pods of the RDMA job")
    assert sorted(p.spec.node_name for p in pods) == sorted(rdma_nodes)
    for pod in pods:
        resources = pod.spec.containers[0].resources
        assert resources.limits[HOSTDEV] == resources.requests[HOSTDEV] == "8"

    more = submit(platform, rdma_job("more", 1))  # the queue's 16 are held by the pair
    eventually(
        lambda: get(platform, more).reason_code == "QueueQuotaExhausted",
        what="the third job waiting on the quota",
    )
    message = str(get(platform, more).reason_message)
    assert "needs 8 nvidia.com/hostdev; queue default has 0 free of 16" in message

    typo = submit(platform, rdma_job("typo", 1, resources={"gpu": 1, "nvidia.com/hostdevs": 1}))
    eventually(
        lambda: get(platform, typo).reason_code == "Unschedulable", what="the typo job waiting"
    )
    assert "did you mean nvidia.com/hostdev?" in str(get(platform, typo).reason_message)


def test_the_oke_rdma_pod_fields_reach_the_pods(platform: Platform, core: Any) -> None:
    job_id = submit(
        platform,
        rdma_job(
            "nccl",
            1,
            securityContext={"capabilities": {"add": ["IPC_LOCK"]}},
            volumes=[{"name": "shm", "mountPath": "/dev/shm", "emptyDir": {"medium": "Memory"}}],
            annotations={"kiban.dev/sim-duration": "1h", MULTUS: "sriov-rdma-vf,sriov-rdma-vf"},
        ),
    )
    (pod,) = eventually(lambda: running_pods(core, job_id, 1), what="the NCCL pod running")
    container = pod.spec.containers[0]
    assert container.security_context.capabilities.add == ["IPC_LOCK"]
    (shm,) = [v for v in pod.spec.volumes if v.name == "shm"]
    assert shm.empty_dir.medium == "Memory"
    assert any(m.mount_path == "/dev/shm" for m in container.volume_mounts)
    assert pod.metadata.annotations[MULTUS] == "sriov-rdma-vf,sriov-rdma-vf"
    assert container.resources.limits[HOSTDEV] == "8"
