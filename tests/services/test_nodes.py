"""Nodes: cordons, the health seam, and what they mean for new work."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from kiban.executors.base import NodeInfo
from kiban.platform import Platform
from kiban.services import jobs, nodes
from kiban.services.auth import Principal
from kiban.services.errors import Forbidden, NotFound
from kiban.store.models import Event
from kiban.store.models_nodes import Node
from kiban.testing import FakeExecutor, manifest
from kiban.testing.platform_jobs import submit_to_platform

ADMIN = Principal(name="admin", tenant=None, is_admin=True)
ALICE = Principal(name="alice", tenant="default", is_admin=False)


def node_events(platform: Platform, name: str) -> list[tuple[str, str, str]]:
    with platform.sessions() as session:
        query = select(Event).where(Event.object_kind == "Node", Event.object_name == name)
        return [(e.type, e.reason, e.message) for e in session.scalars(query.order_by(Event.id))]


def node(platform: Platform, name: str) -> Node:
    with platform.sessions() as session:
        return session.get_one(Node, name)


def run_one_replica_job(platform: Platform, name: str = "train") -> tuple[str, str]:
    """Submit a one-GPU job and run a pass; its id and the node it landed on ("" if none)."""
    job_id = submit_to_platform(platform, manifest(name, gpu=1, command=["t"]))
    platform.loop.run_once()
    with platform.sessions() as session:
        replicas = jobs.replicas_of(session, jobs.get_visible(session, ADMIN, job_id))
        return job_id, replicas[0].node if replicas else ""


def change(platform: Platform, action: str, name: str, who: Principal = ADMIN) -> Node:
    with platform.sessions() as session:
        result: Node = getattr(nodes, action)(session, who, name, at=platform.clock.now())
        session.commit()
        return result


def test_cordon_and_uncordon_are_recorded_once_each(platform: Platform) -> None:
    assert change(platform, "cordon", "node-1").cordoned
    assert change(platform, "cordon", "node-1").cordoned  # again: nothing new
    assert node(platform, "node-1").cordoned
    assert not change(platform, "uncordon", "node-1").cordoned
    assert not change(platform, "uncordon", "node-1").cordoned
    assert [e[:2] for e in node_events(platform, "node-1")] == [
        ("Normal", "Registered"),
        ("Normal", "Cordoned"),
        ("Normal", "Uncordoned"),
    ]
    assert "cordoned by admin" in node_events(platform, "node-1")[1][2]


@pytest.mark.parametrize("name", ["node-9", "", "a\x00b", "n" * 300])
def test_an_unknown_node_is_not_found(platform: Platform, name: str) -> None:
    with pytest.raises(NotFound):
        change(platform, "cordon", name)
    with platform.sessions() as session, pytest.raises(NotFound):
        nodes.set_node_health(session, name, False, "Xid 79", at=0.0)


def test_only_admins_cordon(platform: Platform) -> None:
    with pytest.raises(Forbidden):
        change(platform, "cordon", "node-0", who=ALICE)
    assert not node(platform, "node-0").cordoned


def test_a_cordoned_node_takes_no_new_work_and_keeps_its_running_jobs(platform: Platform) -> None:
    running, placed = run_one_replica_job(platform, "first")
    assert placed
    for name in ("node-0", "node-1", "node-2"):
        change(platform, "cordon", name)
    waiting, nowhere = run_one_replica_job(platform, "second")
    assert nowhere == ""
    with platform.sessions() as session:
        assert jobs.get_visible(session, ADMIN, running).state == "Running"
        assert jobs.get_visible(session, ADMIN, waiting).state == "Pending"
    change(platform, "uncordon", "node-2")
    platform.loop.run_once()
    with platform.sessions() as session:
        job = jobs.get_visible(session, ADMIN, waiting)
        assert job.state == "Running"
        assert {r.node for r in jobs.replicas_of(session, job)} == {"node-2"}


def test_health_verdicts_are_events_when_they_change(platform: Platform) -> None:
    verdicts = [
        (False, "Xid 79: GPU fell off the bus"),
        (False, "Xid 79: GPU fell off the bus"),  # the same again: no event
        (False, "ECC errors"),  # another reason: an event
        (True, "ignored while healthy"),
        (True, ""),
    ]
    for healthy, message in verdicts:
        with platform.sessions() as session:
            nodes.set_node_health(session, "node-0", healthy, message, at=platform.clock.now())
            session.commit()
    assert node_events(platform, "node-0")[1:] == [
        ("Warning", "Unhealthy", "unhealthy: Xid 79: GPU fell off the bus"),
        ("Warning", "Unhealthy", "unhealthy: ECC errors"),
        ("Normal", "Healthy", "healthy again: takes new work"),
    ]
    assert (node(platform, "node-0").healthy, node(platform, "node-0").health_message) == (True, "")


def test_an_unhealthy_node_takes_no_new_work_and_its_jobs_are_found(platform: Platform) -> None:
    job_id, placed = run_one_replica_job(platform)
    with platform.sessions() as session:
        assert [j.id for j in nodes.jobs_on_node(session, placed)] == [job_id]
        assert nodes.jobs_on_node(session, "node-9") == []
        for name in ("node-0", "node-1", "node-2"):
            nodes.set_node_health(session, name, False, "", at=platform.clock.now())
        session.commit()
    assert node(platform, placed).health_message == "unhealthy"  # a verdict always says why
    _, nowhere = run_one_replica_job(platform, "second")
    assert nowhere == ""


def test_the_executors_report_of_health_is_recorded_at_start(
    platform: Platform, executor: FakeExecutor
) -> None:
    reported = executor.nodes()
    sick = NodeInfo(**{**vars(reported[0]), "healthy": False, "health_message": "no GPUs found"})
    with platform.sessions() as session:
        nodes.sync_nodes(session, [sick, *reported[1:]], at=platform.clock.now())
        session.commit()
    assert node_events(platform, "node-0")[-1] == (
        "Warning",
        "Unhealthy",
        "unhealthy: no GPUs found",
    )
    assert not node(platform, "node-0").healthy
