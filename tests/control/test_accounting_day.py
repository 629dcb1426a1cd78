"""A scripted day of jobs, with a preemption, a node lost under a job and a restart of the
control plane in the middle, leaves the usage records (and ``kiban usage``'s report) computed
here by hand: each attempt opened when placed, closed once with how it ended (both stores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from loop_support import cancel, state
from sqlalchemy import func, select
from tests.conftest import fake_nodes

from kiban.control.loop_settings import LoopSettings
from kiban.platform import Platform, build_platform
from kiban.services.accounting import Granularity, UsageGroup, usage_report
from kiban.services.auth import Principal
from kiban.store.models import Job, Replica
from kiban.store.models_accounting import UsageRecord
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import ADMIN, submit_to_platform

HOUR = 3600.0
ANA = Principal(name="ana", tenant="default", is_admin=False)
BOB = Principal(name="bob", tenant="default", is_admin=False)


def records(platform: Platform) -> list[tuple[str, int, str | None, int, float, float | None]]:
    """(job, attempt, outcome, GPUs, start, end) of every record, in the order opened."""
    with platform.sessions() as session:
        rows = session.scalars(select(UsageRecord).order_by(UsageRecord.id)).all()
        return [(r.job_id, r.attempt, r.outcome, r.gpus, r.started_at, r.ended_at) for r in rows]


def test_a_scripted_day_leaves_the_usage_computed_by_hand(
    tmp_path: Path, db_url: str, clock: ManualClock
) -> None:
    executor = FakeExecutor(fake_nodes(), clock=clock)

    def start() -> Platform:
        return build_platform(
            home=tmp_path / "home",
            db_url=db_url,
            executor=executor,
            clock=clock,
            loop_settings=LoopSettings(node_sync_s=0.5),
        )

    platform = start()

    def step(seconds: float) -> float:
        clock.advance(seconds)
        platform.loop.run_once()
        return clock.now()

    t0 = clock.now()
    a = submit_to_platform(platform, manifest("a", gpu=2, cpu="1000m"), ANA)
    b = submit_to_platform(platform, manifest("b", gpu=2, cpu="2000m"), BOB)
    step(1)
    executor.finish_all(a)
    step(HOUR)
    c = submit_to_platform(platform, manifest("c", replicas=2, gpu=2, priorityClass="low"), ANA)
    step(1)
    h = submit_to_platform(platform, manifest("h", gpu=2, priorityClass="high"), BOB)
    step(1800)  # c is asked to stop for h
    step(1)
    assert (state(platform, c), state(platform, h)) == ("Pending", "Running")
    # b's node goes away with its replica.
    with platform.sessions() as session:
        node = session.scalars(select(Replica.node).where(Replica.job_id == b)).one()
    del executor.replicas[(b, 1, 0)]
    executor.set_nodes([n for n in executor.nodes() if n.name != node])
    step(HOUR)  # b's attempt is lost with its node: requeued, and placed again at once
    step(1)
    # The control plane dies with b's second attempt and h running, and comes back 10 min on.
    platform.close()
    clock.advance(600)
    platform = start()
    platform.loop.recover()
    step(1)
    executor.finish_all(b)
    step(HOUR)
    cancel(platform, h)
    step(1)  # h stops
    step(1)  # h is cancelled; c starts again on what h and b held
    now = step(HOUR)
    assert now == t0 + 16807

    assert records(platform) == [
        (a, 1, "succeeded", 2, t0 + 1, t0 + 3601),
        (b, 1, "node-lost", 2, t0 + 1, t0 + 9003),
        (c, 1, "preempted", 4, t0 + 3602, t0 + 5403),
        (h, 1, "cancelled", 2, t0 + 5403, t0 + 13207),  # ran across the restart
        (b, 2, "succeeded", 2, t0 + 9003, t0 + 13205),  # ran across the restart
        (c, 2, None, 4, t0 + 13207, None),
    ]
    with platform.sessions() as session:
        gpu_seconds = dict(
            session.execute(
                select(UsageRecord.job_id, func.sum(UsageRecord.gpu_seconds)).group_by(
                    UsageRecord.job_id
                )
            ).all()
        )
        by_user = usage_report(session, ANA, by=UsageGroup.USER, since=t0, until=now + 1, now=now)
        by_day = usage_report(
            session,
            ADMIN,
            by=UsageGroup.USER,
            since=t0,
            until=now,
            now=now,
            granularity=Granularity.DAY,
        )
        other = Principal(name="eve", tenant="other", is_admin=False)
        unseen = usage_report(session, other, by=UsageGroup.USER, since=t0, until=now, now=now)
    assert gpu_seconds == {a: 7200, b: 18004 + 8404, c: 7204, h: 15608}
    # ana: a 2x3600 + c 4x1801 (preempted) + c again 4x3600 (running); bob: b 2x9002 (lost
    # with its node) + b again 2x4202 + h 2x7804.
    rows = {row.key: row for row in by_user.rows}
    assert set(rows) == {"ana", "bob"}
    assert rows["ana"].gpu_hours == pytest.approx((7200 + 7204 + 14400) / HOUR)
    assert rows["ana"].preempted_gpu_hours == pytest.approx(7204 / HOUR)
    assert rows["ana"].node_lost_gpu_hours == 0
    assert (rows["ana"].attempts, rows["ana"].jobs) == (3, 2)
    assert rows["bob"].gpu_hours == pytest.approx((18004 + 8404 + 15608) / HOUR)
    assert rows["bob"].node_lost_gpu_hours == pytest.approx(18004 / HOUR)
    assert rows["bob"].preempted_gpu_hours == 0
    assert (rows["bob"].attempts, rows["bob"].jobs) == (3, 2)
    # b held 2000m for 9002 + 4202 s.
    assert rows["bob"].cpu_hours >= 2 * (9002 + 4202) / HOUR
    # Cut at midnight UTC (t0 + 6400): what ran across it is split.
    days = {(row.key, row.period_start): row.gpu_hours * HOUR for row in by_day.rows}
    assert days == pytest.approx(
        {
            ("ana", t0): 7200 + 7204,
            ("bob", t0): 2 * 6399 + 2 * (6400 - 5403),
            ("ana", t0 + 6400): 14400,
            ("bob", t0 + 6400): 2 * (9003 - 6400) + 8404 + 2 * (13207 - 6400),
        }
    )
    # Jobs are counted once per period, however many of their attempts it holds.
    jobs = {(row.key, row.period_start): row.jobs for row in by_day.rows}
    assert jobs == {("ana", t0): 2, ("bob", t0): 2, ("ana", t0 + 6400): 1, ("bob", t0 + 6400): 2}
    assert unseen.rows == ()
    platform.close()


def test_a_launch_cut_short_by_a_restart_is_closed_and_its_rerun_counted_apart(
    platform: Platform, clock: ManualClock
) -> None:
    job = submit_to_platform(platform, manifest("a", gpu=2), ANA)
    clock.advance(1)
    platform.loop.run_once()
    placed = clock.now()
    # As if the control plane died between the placement's commit and the launch's.
    with platform.sessions() as session:
        row = session.get(Job, job)
        assert row is not None
        row.state = "Admitted"
        session.commit()
    clock.advance(60)
    platform.loop.recover()
    restarted = clock.now()
    clock.advance(1)
    platform.loop.run_once()
    assert state(platform, job) == "Running"
    assert records(platform) == [
        (job, 1, "stopped", 2, placed, restarted),
        (job, 1, None, 2, restarted + 1, None),  # the same attempt, launched again
    ]
    with platform.sessions() as session:
        report = usage_report(
            session, ANA, by=UsageGroup.USER, since=placed, until=clock.now() + 9, now=clock.now()
        )
    (row,) = report.rows
    assert (row.attempts, row.jobs) == (2, 1)
    assert row.gpu_hours == pytest.approx(2 * (restarted - placed) / HOUR)
