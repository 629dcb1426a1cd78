"""Helpers for driving the control loop in tests: cancel, read jobs and events. (Jobs are
built with ``kiban.testing.manifest``, stored with ``platform_jobs.submit_to_platform``.)"""

from __future__ import annotations

from sqlalchemy import select

from kiban.platform import Platform
from kiban.services import jobs
from kiban.store.models import Event, Job, Replica
from kiban.testing.platform_jobs import ADMIN


def cancel(platform: Platform, job_id: str) -> None:
    with platform.sessions() as session:
        jobs.cancel(session, ADMIN, job_id, at=platform.clock.now())
        session.commit()


def get(platform: Platform, job_id: str) -> Job:
    with platform.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


def state(platform: Platform, job_id: str) -> str:
    return get(platform, job_id).state


def replica_rows(platform: Platform, job_id: str) -> list[Replica]:
    with platform.sessions() as session:
        query = select(Replica).where(Replica.job_id == job_id)
        return list(session.scalars(query.order_by(Replica.attempt, Replica.rank, Replica.id)))


def events(platform: Platform, job_id: str) -> list[tuple[str, str]]:
    with platform.sessions() as session:
        query = select(Event).where(Event.object_kind == "Job", Event.object_name == job_id)
        return [(e.reason, e.message) for e in session.scalars(query.order_by(Event.id))]
