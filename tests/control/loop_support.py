"""Helpers for driving the control loop in tests: submit, cancel, read jobs and events."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from kiban.platform import Platform
from kiban.services import jobs
from kiban.services.auth import Principal
from kiban.store.models import Event, Job, Replica

ADMIN = Principal(name="admin", tenant=None, is_admin=True)


def manifest(
    name: str = "train",
    *,
    replicas: int = 1,
    gpu: int = 1,
    env: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    task: dict[str, Any] = {
        "replicas": replicas,
        "resources": {"gpu": gpu},
        "command": ["python", "train.py"],
    }
    if env:
        task["env"] = env
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"tasks": [task], **spec},
    }


def submit(platform: Platform, document: dict[str, Any]) -> str:
    with platform.sessions() as session:
        job = jobs.submit(session, ADMIN, document, facts=platform.facts, at=platform.clock.now())
        session.commit()
        return job.id


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
