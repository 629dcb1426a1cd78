"""The epilogue in the loop: a job that fails on a node that saw a critical Xid while it ran
cordons that node (by remediation) with an EpilogueCheck event; a healthy report returns it."""

from __future__ import annotations

from sqlalchemy import select

from kiban.platform import Platform
from kiban.store.models import Event, Replica
from kiban.store.models_nodes import Node, NodeCondition, NodeConditionChange, RemediationAction
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform


def job_events(platform: Platform, job_id: str, reason: str) -> list[str]:
    with platform.sessions() as session:
        return list(
            session.scalars(
                select(Event.message).where(Event.object_name == job_id, Event.reason == reason)
            )
        )


def node_row(platform: Platform, name: str) -> Node:
    with platform.sessions() as session:
        node = session.get(Node, name)
        assert node is not None
        return node


def run(platform: Platform, clock: ManualClock, seconds: float = 1.0) -> None:
    clock.advance(seconds)
    platform.loop.run_once()


def test_a_failed_job_cordons_the_node_that_saw_an_xid_until_it_reports_healthy(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    run(platform, clock)
    job = submit_to_platform(platform, manifest("train", replicas=2, gpu=2))
    run(platform, clock)
    with platform.sessions() as session:
        on_node = session.scalars(
            select(Replica.node).where(Replica.job_id == job, Replica.rank == 0)
        ).one()
    with platform.sessions() as session:
        session.add(
            NodeConditionChange(
                node=on_node,
                type="GpuXid",
                status="True",
                reason="CriticalXid",
                message="Xid 79 on GPU 0 (fallen off the bus)",
                at=clock.now(),
            )
        )
        session.commit()
    run(platform, clock)
    executor.finish_all(job, exit_code=1, message="CUDA error")
    run(platform, clock)
    run(platform, clock)

    (message,) = job_events(platform, job, "EpilogueCheck")
    assert on_node in message and "Xid 79" in message and job in message
    node = node_row(platform, on_node)
    assert (node.cordoned, node.cordon_source) == (True, "remediation")
    others = [n for n in ("node-0", "node-1", "node-2") if n != on_node]
    assert not any(node_row(platform, n).cordoned for n in others)

    # The agent's next report, every check healthy: back in service.
    with platform.sessions() as session:
        session.add(
            NodeCondition(
                node=on_node,
                type="GpuXid",
                status="False",
                reason="NoCriticalXid",
                message="",
                last_transition_time=clock.now(),
                updated_at=clock.now(),
                streak=1,
            )
        )
        reported = session.get(Node, on_node)
        assert reported is not None
        reported.agent_reported_at = clock.now() + 0.5
        session.commit()
    run(platform, clock)
    node = node_row(platform, on_node)
    assert (node.cordoned, node.cordon_source) == (False, "")
    with platform.sessions() as session:
        actions = session.execute(
            select(RemediationAction.action, RemediationAction.rule).where(
                RemediationAction.node == on_node
            )
        ).all()
    assert [tuple(a) for a in actions] == [("cordon", "epilogue"), ("uncordon", "epilogue")]


def test_a_failure_without_a_health_event_cordons_nothing(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    run(platform, clock)
    job = submit_to_platform(platform, manifest("train", replicas=1, gpu=1))
    run(platform, clock)
    executor.finish_all(job, exit_code=1)
    run(platform, clock)
    run(platform, clock)
    assert job_events(platform, job, "EpilogueCheck") == []
    assert not any(node_row(platform, f"node-{i}").cordoned for i in range(3))
