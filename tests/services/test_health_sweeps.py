"""Allreduce sweeps in the store: the system queue and lowest priority class, one job per
block kept on its block, results against baselines, and the AllreduceDegraded condition."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from kiban.control.loop_settings import LoopSettings
from kiban.health.allreduce import RESULT_PREFIX, RankResult, SweepResult
from kiban.platform import Platform
from kiban.services import health_sweeps, policy, tenants
from kiban.services.health_sweeps import (
    SWEEP_PRIORITY_CLASS,
    SWEEP_QUEUE,
    SWEEP_TENANT,
    SweepSettings,
)
from kiban.store.models import Event, Job, Replica
from kiban.store.models_nodes import AllreduceResult, NodeCondition, NodeConditionChange
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import ADMIN, submit_to_platform


def result(**busbw: float) -> SweepResult:
    ranks = tuple(
        RankResult(i, node, 0.01, value, value) for i, (node, value) in enumerate(busbw.items())
    )
    return SweepResult("gloo", len(ranks), 1000, 3, ranks)


def test_a_sweep_makes_one_lowest_priority_job_per_block_of_idle_nodes(
    platform: Platform, clock: ManualClock, api: TestClient
) -> None:
    busy = submit_to_platform(platform, manifest("busy", replicas=1, gpu=1))
    platform.loop.run_once()
    answer = api.post("/api/v1/health/sweeps")
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["blocks"] == [["node-1", "node-2"]]
    assert body["skipped"] == [{"block": ["node-0"], "name": "all", "why": "busy"}]
    (job_id,) = body["jobs"]
    with platform.sessions() as session:
        current = policy.current_policy(session)
        lowest = min(c.value for c in current.priority_classes)
        sweep_class = current.priority_class(SWEEP_PRIORITY_CLASS)
        assert sweep_class is not None and sweep_class.value == lowest
        assert [c.name for c in current.priority_classes if c.value == lowest] == [
            SWEEP_PRIORITY_CLASS
        ]
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.queue, job.tenant) == (SWEEP_QUEUE, SWEEP_TENANT)
        assert [e["node"] for e in job.excluded_nodes or []] == ["node-0"]
    clock.advance(1)
    platform.loop.run_once()
    with platform.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.state == "Running"
        nodes = sorted(session.scalars(select(Replica.node).where(Replica.job_id == job_id)))
        assert nodes == ["node-1", "node-2"]
        held = session.get(Job, busy)
        assert held is not None and held.state == "Running"


def test_a_second_sweep_reuses_the_queue(platform: Platform, api: TestClient) -> None:
    for _ in range(2):
        assert api.post("/api/v1/health/sweeps").status_code == 201
    with platform.sessions() as session:
        current = policy.current_policy(session)
        assert [q.name for q in current.queues].count(SWEEP_QUEUE) == 1


def test_results_set_baselines_and_mark_degraded_nodes(platform: Platform) -> None:
    settings = SweepSettings()
    with platform.sessions() as session:
        job = session.get(Job, submit_to_platform(platform, manifest("sweep", replicas=2)))
        assert job is not None
        for at, figures in enumerate(
            [
                {"node-0": 10.0, "node-1": 10.0},
                {"node-0": 12.0, "node-1": 10.0},
                {"node-0": 11.0, "node-1": 5.0},  # node-1 at half its baseline of 10
            ]
        ):
            health_sweeps.store_result(session, job, result(**figures), settings, float(at))
            session.flush()
        latest = health_sweeps.latest_results(session)
        by_node = {n["name"]: n for n in latest["nodes"]}
        assert by_node["node-0"]["baseline"] == 11.0  # median of 10 and 12
        assert by_node["node-0"]["degraded"] is False
        assert by_node["node-1"]["baseline"] == 10.0
        assert by_node["node-1"]["degraded"] is True
        (block,) = latest["blocks"]
        assert block["busbw"] == 5.0 and block["degraded"] is True
        conditions = {
            c.node: c
            for c in session.scalars(
                select(NodeCondition).where(NodeCondition.type == "AllreduceDegraded")
            )
        }
        # The block is degraded, so every node of it is marked; node-1's own figure says why.
        assert conditions["node-1"].status == "True"
        assert "50%" in conditions["node-1"].message
        assert conditions["node-0"].status == "True"
        assert "its block's" in conditions["node-0"].message
        history = [
            (h.node, h.status)
            for h in session.scalars(select(NodeConditionChange).order_by(NodeConditionChange.id))
        ]
        assert history == [
            ("node-0", "False"),
            ("node-1", "False"),
            ("node-0", "True"),
            ("node-1", "True"),
        ]


def test_only_admins_start_sweeps(platform: Platform, api: TestClient) -> None:
    with platform.sessions() as session:
        tenants.create_tenant(session, ADMIN, "team", at=0.0)
        token = tenants.create_member_token(session, ADMIN, "team", "alice", at=0.0)
        session.commit()
    headers = {"Authorization": f"Bearer {token}"}
    assert api.post("/api/v1/health/sweeps", headers=headers).status_code == 403
    assert api.get("/api/v1/health/sweeps", headers=headers).status_code == 403


@pytest.mark.parametrize("loop_settings", [LoopSettings(sweep_every_s=100.0)])
def test_the_loop_starts_a_sweep_every_interval(platform: Platform, clock: ManualClock) -> None:
    def sweep_jobs() -> list[str]:
        with platform.sessions() as session:
            return list(session.scalars(select(Job.id).where(Job.queue == SWEEP_QUEUE)))

    platform.loop.run_once()  # the first interval starts now
    clock.advance(99)
    platform.loop.run_once()
    assert sweep_jobs() == []
    clock.advance(1)
    platform.loop.run_once()
    assert len(sweep_jobs()) == 1
    clock.advance(50)
    platform.loop.run_once()
    assert len(sweep_jobs()) == 1
    clock.advance(50)
    platform.loop.run_once()
    # The first sweep's job still runs on the idle nodes (the fake executor's never end): the
    # second finds no idle nodes and submits nothing.
    assert len(sweep_jobs()) == 1


def test_sweeps_are_off_unless_asked(platform: Platform, clock: ManualClock) -> None:
    platform.loop.run_once()
    clock.advance(10 * 24 * 3600)
    platform.loop.run_once()
    with platform.sessions() as session:
        assert session.scalars(select(Job).where(Job.queue == SWEEP_QUEUE)).first() is None


def test_the_loop_collects_a_finished_sweep_from_its_rank_0_log(
    platform: Platform, executor: FakeExecutor, clock: ManualClock, api: TestClient
) -> None:
    (job_id,) = api.post("/api/v1/health/sweeps").json()["jobs"]
    clock.advance(1)
    platform.loop.run_once()
    figures = result(**{"node-0": 20.0, "node-1": 21.0, "node-2": 19.0})
    executor.write_log(job_id, 0, f"warming up\n{RESULT_PREFIX}{figures.to_json()}\n".encode(), 1.0)
    executor.finish_all(job_id, exit_code=0)
    for _ in range(3):
        clock.advance(1)
        platform.loop.run_once()
    body = api.get("/api/v1/health/sweeps").json()
    (block,) = body["blocks"]
    assert (block["job"], block["busbw"], block["degraded"]) == (job_id, 19.0, False)
    assert [(n["name"], n["busbw"]) for n in body["nodes"]] == [
        ("node-0", 20.0),
        ("node-1", 21.0),
        ("node-2", 19.0),
    ]
    # Collected once: another pass stores nothing more.
    clock.advance(1)
    platform.loop.run_once()
    with platform.sessions() as session:
        assert len(session.scalars(select(AllreduceResult)).all()) == 4


def test_a_running_sweep_gives_way_to_any_waiting_job(
    platform: Platform, executor: FakeExecutor, clock: ManualClock, api: TestClient
) -> None:
    (sweep,) = api.post("/api/v1/health/sweeps").json()["jobs"]
    clock.advance(1)
    platform.loop.run_once()
    # A normal-priority job (its class does not preempt) for nodes the sweep holds.
    work = submit_to_platform(platform, manifest("train", replicas=2, gpu=2))
    for _ in range(5):
        clock.advance(1)
        platform.loop.run_once()
    with platform.sessions() as session:
        swept = session.get(Job, sweep)
        trained = session.get(Job, work)
        assert swept is not None and trained is not None
        assert (swept.state, trained.state) == ("Cancelled", "Running")
        reasons = session.scalars(select(Event.reason).where(Event.object_name == sweep)).all()
        assert "SweepYielded" in reasons


def test_a_sweep_measures_with_the_size_and_iterations_asked(
    platform: Platform, api: TestClient
) -> None:
    answer = api.post("/api/v1/health/sweeps", params={"sizeMb": 1.5, "iters": 3})
    assert answer.status_code == 201, answer.text
    (job_id,) = answer.json()["jobs"]
    with platform.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        (task,) = job.spec["spec"]["tasks"]
        assert task["command"][-4:] == ["--size-mb", "1.5", "--iters", "3"]
    for bad, field in [({"sizeMb": 0}, "sizeMb"), ({"iters": "many"}, "iters")]:
        refused = api.post("/api/v1/health/sweeps", params=bad)
        assert refused.status_code == 422 and field in refused.text, refused.text
