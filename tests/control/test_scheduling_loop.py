"""The loop applies the scheduler's policy decisions: preemption and requeue, checkpoints,
decayed usage, unhealthy nodes, and start-time forecasts (fake executor, manual clock)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from loop_support import events, get, state
from sqlalchemy import select

from kiban.control.loop_settings import LoopSettings
from kiban.platform import Platform
from kiban.scheduler.policy import Policy
from kiban.services.errors import InvalidInput
from kiban.services.policy import apply_policy
from kiban.store.models import Replica
from kiban.store.models_accounting import TenantUsage
from kiban.store.models_nodes import Node
from kiban.testing import FakeExecutor, ManualClock, eventually, manifest
from kiban.testing.platform_jobs import submit_to_platform


def run_passes(platform: Platform, clock: ManualClock, count: int = 1) -> None:
    for _ in range(count):
        clock.advance(1)
        platform.loop.run_once()


def test_high_priority_preempts_and_the_victim_returns_keeping_its_submit_time(
    platform: Platform, clock: ManualClock
) -> None:
    low = submit_to_platform(platform, manifest("low", replicas=3, gpu=2, priorityClass="low"))
    run_passes(platform, clock)
    assert state(platform, low) == "Running"
    submitted = get(platform, low).submitted_at

    high = submit_to_platform(platform, manifest("high", replicas=1, gpu=2, priorityClass="high"))
    run_passes(platform, clock)
    assert state(platform, low) == "Stopping"
    assert get(platform, high).reason_code == "WaitingForPreemption"
    assert get(platform, high).nominated_nodes  # the victim's nodes are kept for it
    run_passes(platform, clock, 2)

    assert state(platform, high) == "Running"
    victim = get(platform, low)
    assert (victim.state, victim.preempted_by, victim.submitted_at) == (
        "Pending",
        high,
        submitted,
    )
    reasons = [reason for reason, _ in events(platform, low)]
    assert "Preempted" in reasons and "Requeued" in reasons
    preempted = next(message for reason, message in events(platform, low) if reason == "Preempted")
    assert high in preempted


def test_the_victim_with_the_freshest_checkpoint_goes_first(
    platform: Platform, executor: FakeExecutor, clock: ManualClock, tmp_path: Path
) -> None:
    executor.checkpoints_root = str(tmp_path / "ckpt")
    ids = [
        submit_to_platform(platform, manifest(f"low-{i}", replicas=1, gpu=2, priorityClass="low"))
        for i in range(3)
    ]
    run_passes(platform, clock)
    assert [state(platform, j) for j in ids] == ["Running"] * 3
    # An hour later low-1 writes a checkpoint: preempting it loses the least work.
    clock.advance(3600)
    directory = tmp_path / "ckpt" / ids[1]
    directory.mkdir(parents=True)
    (directory / "step-100.pt").write_bytes(b"weights")
    os.utime(directory / "step-100.pt", (clock.now() - 1, clock.now() - 1))
    run_passes(platform, clock)
    assert get(platform, ids[1]).last_checkpoint_at == clock.now() - 2

    submit_to_platform(platform, manifest("urgent", replicas=1, gpu=2, priorityClass="high"))
    run_passes(platform, clock)
    assert [state(platform, j) for j in ids] == ["Running", "Stopping", "Running"]


def test_usage_accrues_with_decay_and_is_kept_in_the_store(
    platform: Platform, clock: ManualClock
) -> None:
    submit_to_platform(platform, manifest("train", replicas=2, gpu=2))
    run_passes(platform, clock)
    run_passes(platform, clock)  # the first pass with it running starts its usage row
    clock.advance(100)
    platform.loop.run_once()
    with platform.sessions() as session:
        (row,) = session.scalars(select(TenantUsage)).all()
    # 4 GPUs for the 100 s since its row started, a week's half-life: just under 400.
    assert row.tenant == "default"
    assert row.usage == pytest.approx(400 * (1 - 100 / 7 / 86400 * 0.3466), rel=1e-4)


def test_jobs_on_a_node_that_turns_unhealthy_return_to_their_queue(
    platform: Platform, clock: ManualClock
) -> None:
    job_id = submit_to_platform(platform, manifest("train", replicas=1, gpu=2))
    run_passes(platform, clock)
    with platform.sessions() as session:
        node_name = session.scalars(select(Replica.node).where(Replica.job_id == job_id)).one()
        node = session.get(Node, node_name)
        assert node is not None
        node.healthy = False
        node.health_message = "XID 79: GPU fell off the bus"
        session.commit()
    run_passes(platform, clock, 3)
    job = get(platform, job_id)
    assert job.state == "Running" and job.attempt == 2
    reasons = [reason for reason, _ in events(platform, job_id)]
    assert "NodeUnhealthy" in reasons and "Requeued" in reasons


def test_a_waiting_job_gets_a_start_time_forecast(platform: Platform, clock: ManualClock) -> None:
    first = submit_to_platform(platform, manifest("first", replicas=3, gpu=2, maxRuntime="10m"))
    run_passes(platform, clock)
    started = get(platform, first).started_at
    assert started is not None
    second = submit_to_platform(platform, manifest("second", replicas=3, gpu=2))
    clock.advance(10)  # past the forecast interval
    platform.loop.run_once()
    waiting = get(platform, second)
    assert waiting.state == "Pending"
    assert waiting.eta == round(started + 600)
    assert waiting.cluster_position == 1


@pytest.mark.parametrize(
    "loop_settings", [LoopSettings(engine_policy=Policy(max_placements_per_cycle=1))]
)
def test_a_pass_stopped_at_its_placement_budget_is_followed_by_another_at_once(
    platform: Platform, clock: ManualClock
) -> None:
    """The clock stands still, so only the budget's follow-up passes can start the later jobs
    (a burst of asked-for passes is otherwise spaced by min_interval_s)."""
    ids = [submit_to_platform(platform, manifest(f"j{i}", replicas=1, gpu=1)) for i in range(3)]
    platform.loop.start()
    try:
        platform.loop.wake()
        eventually(
            lambda: all(state(platform, job_id) != "Pending" for job_id in ids),
            what="every job started by the budget's follow-up passes",
        )
    finally:
        platform.loop.stop()


def test_nested_cohorts_lend_through_their_parent(platform: Platform, clock: ManualClock) -> None:
    """A queue of a child cohort borrows the idle quota of a queue of its parent cohort; a queue
    of a cohort outside that tree borrows nothing from it."""
    policy = {
        "cohorts": [{"name": "org"}, {"name": "vision", "parent": "org"}, {"name": "other"}],
        "queues": [
            {"name": "lender", "cohort": "org", "quota": {"gpu": 4}},
            {"name": "child", "cohort": "vision", "quota": {"gpu": 0}},
            {"name": "outsider", "cohort": "other", "quota": {"gpu": 0}},
        ],
    }
    with platform.sessions() as session:
        apply_policy(session, policy, actor="admin", at=clock.now())
        session.commit()
    child = submit_to_platform(platform, manifest("child", replicas=2, gpu=2, queue="child"))
    with pytest.raises(InvalidInput) as refused:  # it could never borrow a GPU: no lender
        submit_to_platform(platform, manifest("outsider", replicas=1, gpu=1, queue="outsider"))
    assert [p.field for p in refused.value.problems] == ["spec.queue"]
    assert "queue outsider can never hold more than 0" in refused.value.problems[0].message
    run_passes(platform, clock)
    assert state(platform, child) == "Running"
