"""Allreduce sweeps give way to real work through the scheduler: the sweep queue is a scavenger
queue, so a sweep job is preempted (then cancelled, with ``SweepYielded``) only by a job whose
placement needs its nodes, while other sweep jobs and other waiting jobs are left alone."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from kiban.executors.base import NodeInfo
from kiban.platform import Platform
from kiban.services import policy
from kiban.services.health_sweeps import SWEEP_QUEUE
from kiban.store.models import Event, Job
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import ADMIN, submit_to_platform

RACKS = {"node-0": "a", "node-1": "a", "node-2": "b", "node-3": "b"}


@pytest.fixture
def executor(clock: ManualClock) -> FakeExecutor:
    """Four nodes of 2 GPUs in two racks; the policy's blocks are the racks."""
    nodes = [
        NodeInfo(
            name=name,
            gpus=2,
            cpu_millis=8000,
            memory=32 * 2**30,
            labels={"kubernetes.io/hostname": name, "rack": rack},
        )
        for name, rack in RACKS.items()
    ]
    return FakeExecutor(nodes, clock=clock)


@pytest.fixture
def racks(platform: Platform) -> None:
    levels = [
        {"name": "rack", "label": "rack"},
        {"name": "host", "label": "kubernetes.io/hostname"},
    ]
    with platform.sessions() as session:
        policy.apply_policy(session, {"topology": {"levels": levels}}, actor="test", at=0.0)
        session.commit()
    platform.loop.run_once()


def states(platform: Platform, *ids: str) -> list[str]:
    with platform.sessions() as session:
        return [job.state for job in (session.get(Job, i) for i in ids) if job is not None]


def run(platform: Platform, clock: ManualClock, passes: int = 5) -> None:
    for _ in range(passes):
        clock.advance(1)
        platform.loop.run_once()


def yielded_events(platform: Platform, job_id: str) -> list[str]:
    with platform.sessions() as session:
        return list(
            session.scalars(
                select(Event.message).where(
                    Event.object_name == job_id, Event.reason == "SweepYielded"
                )
            )
        )


@pytest.mark.usefixtures("racks")
def test_a_job_needing_a_sweeps_nodes_takes_them_and_the_other_sweep_runs_on(
    platform: Platform, clock: ManualClock, api: TestClient
) -> None:
    sweeps = api.post("/api/v1/health/sweeps").json()["jobs"]
    assert len(sweeps) == 2  # one per rack
    run(platform, clock, 1)
    assert states(platform, *sweeps) == ["Running", "Running"]
    work = submit_to_platform(platform, manifest("train", replicas=1, gpu=2))
    run(platform, clock)
    assert states(platform, work) == ["Running"]
    state_of = dict(zip(sweeps, states(platform, *sweeps), strict=True))
    ended = [s for s in sweeps if state_of[s] == "Cancelled"]
    kept = [s for s in sweeps if state_of[s] == "Running"]
    assert len(ended) == 1 and len(kept) == 1
    (message,) = yielded_events(platform, ended[0])
    assert f"job {work}" in message
    assert yielded_events(platform, kept[0]) == []
    with platform.sessions() as session:
        current = policy.current_policy(session)
        assert current.is_scavenger(SWEEP_QUEUE)


@pytest.mark.usefixtures("racks")
def test_a_job_waiting_for_other_nodes_leaves_the_sweep_running(
    platform: Platform, clock: ManualClock, api: TestClient
) -> None:
    hold = submit_to_platform(platform, manifest("hold", replicas=1, gpu=2))
    run(platform, clock, 1)
    (sweep,) = api.post("/api/v1/health/sweeps").json()["jobs"]  # rack a has one idle node
    run(platform, clock, 1)
    # Both nodes of rack a, one of them held: it waits for capacity, but not on the sweep's.
    rack_a = manifest("rack-a", replicas=2, gpu=2, task={"nodeSelector": {"rack": "a"}})
    waiting = submit_to_platform(platform, rack_a, ADMIN)
    run(platform, clock)
    assert states(platform, hold, sweep, waiting) == ["Running", "Running", "Pending"]
    with platform.sessions() as session:
        job = session.get(Job, waiting)
        assert job is not None and job.reason_code == "InsufficientCapacity"
    assert yielded_events(platform, sweep) == []


def test_a_sweep_queue_declared_before_scavengers_is_made_one(
    platform: Platform, api: TestClient
) -> None:
    with platform.sessions() as session:
        queues = [{"name": "default"}, {"name": SWEEP_QUEUE, "tenant": "default"}]
        policy.apply_policy(session, {"queues": queues}, actor="test", at=0.0)
        session.commit()
    assert api.post("/api/v1/health/sweeps").status_code == 201
    with platform.sessions() as session:
        current = policy.current_policy(session)
        assert current.is_scavenger(SWEEP_QUEUE)
        assert [q.name for q in current.queues].count(SWEEP_QUEUE) == 1
