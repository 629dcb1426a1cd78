"""Deleting a tenant or a queue that holds inference services and notebooks (issue 27, point 4):
refused naming them; with drain, the services are deleted (their replicas stop and the
controller does not make new ones), the notebooks stopped, and the deletion goes through once
all has ended."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from kiban.domain.notebook import NotebookRequest, NotebookState
from kiban.domain.roles import Role
from kiban.domain.states import TERMINAL
from kiban.platform import Platform
from kiban.services import notebooks, serving, tenants
from kiban.services.auth import Principal
from kiban.services.draining import Deletion
from kiban.services.errors import Conflict
from kiban.store.models import Job
from kiban.store.models_serving import NotebookRow, ServiceRow

ADMIN = Principal("admin", None, is_admin=True)
TINA = Principal("tina", "vision", role=Role.TENANT_ADMIN)
ALICE = Principal("alice", "vision", role=Role.MEMBER)


def service_doc(name: str, queue: str) -> dict[str, Any]:
    spec = {
        "queue": queue,
        "model": {"name": "tiny", "storageUri": "file:///models/tiny"},
        "resources": {"gpu": 1},
    }
    return {"apiVersion": "kiban/v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def vision(platform: Platform) -> Platform:
    """Tenant vision with queues vision-q and vision-r; service chat in vision-q (its replica
    admitted), a notebook lab of alice's in vision-r."""
    now = platform.clock.now()
    with platform.sessions() as session:
        tenants.create_tenant(session, ADMIN, "vision", now)
        session.commit()
        for queue in ("vision-q", "vision-r"):
            tenants.create_queue(session, ADMIN, name=queue, tenant="vision", gpu_quota=2, at=now)
            session.commit()
    platform.refresh_policy()
    with platform.sessions() as session:
        serving.apply(session, ALICE, service_doc("chat", "vision-q"), facts=platform.facts, at=now)
        notebooks.start(
            session,
            ALICE,
            NotebookRequest(name="lab", queue="vision-r"),
            home=platform.home,
            executor=platform.executor,
            facts=platform.facts,
            policy=platform.policy,
            at=now,
        )
        session.commit()
    passes(platform)
    assert replica_jobs(platform) == (1, 1)
    return platform


def passes(platform: Platform, count: int = 3) -> None:
    """Serving controller and control loop passes, a minute apart (grace periods end)."""
    for _ in range(count):
        platform.services.run_once()
        platform.loop.run_once()
        platform.clock.advance(60)


def replica_jobs(platform: Platform) -> tuple[int, int]:
    """Jobs of queue vision-q (chat's replicas): (made so far, not ended)."""
    with platform.sessions() as session:
        made = session.scalar(select(func.count()).where(Job.queue == "vision-q")) or 0
        unended = session.scalar(
            select(func.count()).where(
                Job.queue == "vision-q", Job.state.not_in([s.value for s in TERMINAL])
            )
        )
        return made, unended or 0


def delete_queue(platform: Platform, name: str, drain: bool, who: Principal = TINA) -> Deletion:
    with platform.sessions() as session:
        done = tenants.delete_queue(session, who, name, platform.clock.now(), drain)
        session.commit()
    platform.refresh_policy()
    return done


def delete_tenant(platform: Platform, drain: bool) -> Deletion:
    with platform.sessions() as session:
        done = tenants.delete_tenant(session, ADMIN, "vision", platform.clock.now(), drain)
        session.commit()
    platform.refresh_policy()
    return done


def test_a_queue_with_a_service_is_refused_naming_it_and_drained_stops_its_replicas(
    vision: Platform,
) -> None:
    with pytest.raises(Conflict) as refused:
        delete_queue(vision, "vision-q", drain=False)
    assert "service(s) chat" in refused.value.message
    assert "1 unfinished job(s)" in refused.value.message  # its replica

    draining = delete_queue(vision, "vision-q", drain=True)
    assert (draining.deleted, draining.services) == (False, ("chat",))
    assert "service(s) chat being removed" in draining.message
    passes(vision)
    assert replica_jobs(vision) == (1, 0)  # ended, and none made again
    assert delete_queue(vision, "vision-q", drain=True).deleted
    with vision.sessions() as session:
        assert session.scalars(select(ServiceRow.name)).all() == []
    passes(vision)
    assert replica_jobs(vision) == (1, 0)
    with vision.sessions() as session:  # the other queue's notebook was not stopped
        lab = session.scalars(select(NotebookRow)).one()
        assert lab.state != NotebookState.STOPPED.value
        assert "delete" not in (lab.reason or "")


def test_a_queue_with_a_notebook_is_refused_naming_it_and_drained_stops_it(
    vision: Platform,
) -> None:
    with pytest.raises(Conflict) as refused:
        delete_queue(vision, "vision-r", drain=False)
    assert "notebook(s) lab" in refused.value.message
    assert "service(s)" not in refused.value.message  # chat is vision-q's

    draining = delete_queue(vision, "vision-r", drain=True)
    assert (draining.deleted, draining.services) == (False, ())
    with vision.sessions() as session:
        lab = session.scalars(select(NotebookRow)).one()
        assert lab.state == NotebookState.STOPPED.value
        assert lab.reason == "stopped by tina to delete queue vision-r"
    passes(vision)
    assert delete_queue(vision, "vision-r", drain=True).deleted
    assert replica_jobs(vision) == (1, 1)  # chat still serves


def test_a_tenant_is_deleted_by_draining_its_services_and_notebooks(vision: Platform) -> None:
    with pytest.raises(Conflict) as refused:
        delete_tenant(vision, drain=False)
    message = refused.value.message
    assert "tenant vision holds 2 unfinished job(s)" in message
    assert "service(s) chat" in message and "notebook(s) lab" in message

    draining = delete_tenant(vision, drain=True)
    assert (draining.deleted, draining.cancelled, draining.services) == (False, 2, ("chat",))
    for _ in range(3):  # ask again as `kiban admin delete-tenant --drain` does
        passes(vision, 1)
        if delete_tenant(vision, drain=True).deleted:
            break
    else:
        pytest.fail("the tenant was not deleted once its service and notebook had ended")
    assert replica_jobs(vision) == (1, 0)
    with vision.sessions() as session:
        assert session.scalars(select(ServiceRow.name)).all() == []
        lab = session.scalars(select(NotebookRow)).one()
        assert lab.state == NotebookState.STOPPED.value
        unended = select(Job.id).where(Job.state.not_in([s.value for s in TERMINAL]))
        assert session.scalars(unended).all() == []
