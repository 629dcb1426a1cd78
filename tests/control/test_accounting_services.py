"""A service's replicas leave usage records of kind service, one per replica job, closed as
stopped when the replicas are scaled away (here: the service deleted)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from kiban.platform import Platform
from kiban.services import serving
from kiban.services.auth import Principal
from kiban.store.models import Job
from kiban.store.models_accounting import UsageRecord
from kiban.testing import ManualClock

ALICE = Principal(name="alice", tenant="default", is_admin=False)


def test_service_replicas_are_accounted_as_services_and_end_stopped(
    platform: Platform, clock: ManualClock
) -> None:
    platform.services.probe = lambda address, path: True
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": "chat"},
        "spec": {
            "model": {"name": "tiny", "storageUri": "file:///models/tiny"},
            "resources": {"gpu": 1},
            "minReplicas": 2,
            "maxReplicas": 2,
        },
    }
    with platform.sessions() as session:
        serving.apply(session, ALICE, document, facts=platform.facts, at=clock.now())
        session.commit()

    def settle(passes: int) -> None:
        for _ in range(passes):
            clock.advance(1)
            platform.services.run_once()
            platform.loop.run_once()

    settle(3)
    clock.advance(3600)
    with platform.sessions() as session:
        serving.delete(session, ALICE, "chat", clock.now())
        session.commit()
    settle(4)
    with platform.sessions() as session:
        jobs = {j.id: j for j in session.scalars(select(Job))}
        records = session.scalars(select(UsageRecord).order_by(UsageRecord.id)).all()
    assert {j.state for j in jobs.values()} == {"Cancelled"}
    assert sorted(r.job_id for r in records) == sorted(jobs)
    for r in records:
        job = jobs[r.job_id]
        assert (r.kind, r.outcome, r.gpus, r.tenant) == ("service", "stopped", 1, "default")
        assert (r.started_at, r.ended_at) == (job.admitted_at, job.finished_at)
        assert r.ended_at is not None and r.ended_at - r.started_at > 3600
        assert r.gpu_seconds == pytest.approx(r.ended_at - r.started_at)
