"""Extended resources through the control loop: nodes that advertise them, jobs that ask for
them start only where enough are free, and the snapshot counts what running replicas hold
(read from the stored spec)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from loop_support import get

from kiban.control.snapshot_builder import SpecCache, build_snapshot
from kiban.executors.base import NodeInfo
from kiban.platform import Platform
from kiban.testing import ManualClock, manifest
from kiban.testing.fake_executor import FakeExecutor
from kiban.testing.platform_jobs import submit_to_platform

HOSTDEV = "nvidia.com/hostdev"


@pytest.fixture
def executor(clock: ManualClock) -> FakeExecutor:
    nodes = [
        NodeInfo(
            name=f"rdma-{i}",
            gpus=2,
            cpu_millis=8000,
            memory=32 * 2**30,
            labels={"kubernetes.io/hostname": f"rdma-{i}"},
            extended={HOSTDEV: 2},
        )
        for i in range(2)
    ]
    plain = NodeInfo("plain", 8, 8000, 32 * 2**30, {"kubernetes.io/hostname": "plain"})
    return FakeExecutor([*nodes, plain], clock=clock)


def rdma_job(name: str, hostdev: int) -> dict[str, object]:
    return manifest(name, gpu=1, task={"resources": {"gpu": 1, HOSTDEV: hostdev}})


def test_jobs_go_where_the_resource_is_free_and_the_snapshot_counts_it(
    platform: Platform,
) -> None:
    first = submit_to_platform(platform, rdma_job("first", 2))
    second = submit_to_platform(platform, rdma_job("second", 2))
    plain = submit_to_platform(platform, manifest("plain", gpu=8))
    platform.loop.run_once()
    assert get(platform, first).state == "Running"
    assert get(platform, second).state == "Running"
    assert get(platform, plain).state == "Running"

    with platform.sessions() as session:
        snap = build_snapshot(session, SpecCache(), platform.clock.now())
    nodes = {n.name: n for n in snap.nodes}
    assert nodes["rdma-0"].extended == {HOSTDEV: 2}
    assert nodes["rdma-0"].free_extended == {HOSTDEV: 0}
    assert nodes["rdma-1"].free_extended == {HOSTDEV: 0}
    assert not nodes["plain"].extended
    running = {j.id: j for j in snap.running}
    assert [r.extended for r in running[first].replicas] == [((HOSTDEV, 2),)]
    assert running[first].flavor_extended == {"default": ((HOSTDEV, 2),)}
    assert running[plain].replicas[0].extended == ()

    third = submit_to_platform(platform, rdma_job("third", 1))
    platform.loop.run_once()
    job = get(platform, third)
    assert job.state == "Pending"
    assert job.reason_code == "InsufficientCapacity"
    assert "0 nvidia.com/hostdev free of the 1 nvidia.com/hostdev needed" in str(job.reason_message)


def test_a_resource_no_node_advertises_waits_naming_the_close_one(platform: Platform) -> None:
    spelled = manifest("spelled", gpu=1, task={"resources": {"gpu": 1, "nvidia.com/hostdevs": 1}})
    job_id = submit_to_platform(platform, spelled)  # accepted: a device plugin may register it
    platform.loop.run_once()
    job = get(platform, job_id)
    assert job.state == "Pending"
    assert job.reason_code == "Unschedulable"
    assert "no node advertises nvidia.com/hostdevs (did you mean nvidia.com/hostdev?)" in str(
        job.reason_message
    )


def test_the_nodes_listing_shows_what_each_node_advertises(api: TestClient) -> None:
    listed = {n["name"]: n for n in api.get("/api/v1/nodes").json()}
    assert listed["rdma-0"]["extended"] == {HOSTDEV: 2}
    assert listed["plain"]["extended"] == {}
