"""Idle GPUs through the control loop: the agents' readings in the store, one ``GpusIdle``
warning per idle spell, and the idle jobs ``/metrics`` reads; the cycle histogram."""

from __future__ import annotations

from sqlalchemy import select

from kiban.platform import Platform
from kiban.services.policy import apply_policy
from kiban.store.models import Event, Replica
from kiban.store.models_nodes import NodeReadingRow
from kiban.testing import manifest
from kiban.testing.platform_jobs import submit_to_platform

WINDOW = 120.0


def read(platform: Platform, job_id: str, percent: float) -> None:
    """Every node of the job's replicas reads ``percent`` on every GPU, now."""
    now = platform.clock.now()
    with platform.sessions() as session:
        nodes = set(session.scalars(select(Replica.node).where(Replica.job_id == job_id)))
        for node in nodes:
            gpus = [{"index": i, "utilization_percent": percent} for i in range(2)]
            session.merge(
                NodeReadingRow(node=node, taken_at=now, reading={"node": node, "gpus": gpus})
            )
        session.commit()


def idle_events(platform: Platform, job_id: str) -> list[str]:
    with platform.sessions() as session:
        query = select(Event).where(Event.object_name == job_id, Event.reason == "GpusIdle")
        return [f"{e.type}: {e.message}" for e in session.scalars(query.order_by(Event.id))]


def step(platform: Platform, job_id: str, percent: float, seconds: float = 30) -> None:
    platform.clock.advance(seconds)
    read(platform, job_id, percent)
    platform.loop.run_once()


def test_one_event_per_idle_spell(platform: Platform) -> None:
    with platform.sessions() as session:
        document = {"idleGpus": {"utilizationPercent": 10, "window": WINDOW}}
        apply_policy(session, document, actor="test", at=platform.clock.now())
        session.commit()
    platform.policy_changed()
    job = submit_to_platform(platform, manifest("train", replicas=2, gpu=2))
    platform.loop.run_once()
    tracker = platform.loop.idle_gpus
    for _ in range(4):  # 0, 30, 60, 90 s idle: not yet the window
        step(platform, job, 3.0)
    assert tracker.idle == () and idle_events(platform, job) == []
    for _ in range(3):  # past the window: one warning, however long it stays idle
        step(platform, job, 3.0)
    assert [(j.job, j.idle_gpus) for j in tracker.idle] == [(job, 4)]
    assert idle_events(platform, job) == ["Warning: 4 GPUs under 10% utilization for 120s or more"]
    step(platform, job, 55.0)  # busy again: the spell ends
    assert tracker.idle == ()
    for _ in range(6):  # a new spell, a new warning
        step(platform, job, 0.0)
    assert len(idle_events(platform, job)) == 2


def test_readings_are_looked_at_every_15_seconds_at_most(platform: Platform) -> None:
    job = submit_to_platform(platform, manifest("train", gpu=1))
    platform.loop.run_once()
    tracker = platform.loop.idle_gpus
    step(platform, job, 0.0)
    seen = dict(tracker.state.since)
    assert seen
    step(platform, job, 90.0, seconds=5)  # too soon: the busy reading is not looked at yet
    assert tracker.state.since == seen
    step(platform, job, 90.0, seconds=10)
    assert tracker.state.since == {}


def test_each_scheduling_pass_is_timed(platform: Platform) -> None:
    def passes() -> float:
        (family,) = platform.loop.cycle_seconds.collect()
        return next(s.value for s in family.samples if s.name.endswith("_count"))

    before = passes()
    for _ in range(3):
        platform.loop.run_once()
    assert passes() == before + 3
