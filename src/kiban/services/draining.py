"""What a tenant or a queue still holds before it may be deleted, and draining it.

A tenant or queue holds unfinished jobs, inference services (whose controller keeps making
replica jobs while the service lives) and active notebooks (whose run is a job). Deleting is
refused (409, naming them) while it holds any; draining deletes its services (the serving
controller stops their replicas, then removes them), stops its notebooks and cancels its other
jobs, and the deletion goes through on a later call once every job has ended and every service
is gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.domain.event_reasons import JobEventReason
from kiban.domain.notebook import NotebookState
from kiban.domain.rollout import RevisionState
from kiban.domain.states import TERMINAL, JobState
from kiban.services import notebooks, serving
from kiban.services.auth import Principal
from kiban.services.errors import Conflict
from kiban.services.jobs import stop_unended
from kiban.store.models import Job
from kiban.store.models_serving import NotebookRow, ServiceReplica, ServiceRevision, ServiceRow

SHOWN = 5
"""How many names of each kind a refusal lists (then ``...``)."""


@dataclass(frozen=True, slots=True)
class Deletion:
    """What a deletion did: ``deleted``, or not yet, with ``stopping`` jobs still ending and
    ``services`` still being removed (after a drain cancelled ``cancelled`` jobs and deleted
    the services)."""

    deleted: bool
    stopping: int = 0
    cancelled: int = 0
    services: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        if self.deleted:
            return "deleted"
        removing = f", service(s) {', '.join(self.services)} being removed" if self.services else ""
        return (
            f"draining: {self.cancelled} job(s) cancelled now, {self.stopping} still ending"
            f"{removing}; ask again once they have ended"
        )


@dataclass(frozen=True, slots=True)
class Holdings:
    """What stands in the way of a deletion: unfinished jobs (service replicas and notebook
    runs among them, locked for update), services not removed yet, active notebooks."""

    jobs: list[Job]
    services: list[ServiceRow]
    notebooks: list[NotebookRow]

    @property
    def empty(self) -> bool:
        return not (self.jobs or self.services or self.notebooks)

    def describe(self) -> str:
        """``3 unfinished job(s) (j1, j2, j3), service(s) chat, notebook(s) lab``."""
        parts = []
        if self.jobs:
            parts.append(f"{len(self.jobs)} unfinished job(s) ({_names(j.id for j in self.jobs)})")
        if self.services:
            parts.append(f"service(s) {_names(s.name for s in self.services)}")
        if self.notebooks:
            parts.append(f"notebook(s) {_names(n.name for n in self.notebooks)}")
        return ", ".join(parts)


def _names(names: Any) -> str:
    listed = sorted(names)
    return ", ".join(listed[:SHOWN]) + (" ..." if len(listed) > SHOWN else "")


def _unfinished(session: Session, *where: Any) -> list[Job]:
    terminal = [state.value for state in TERMINAL]
    query = select(Job).where(Job.state.not_in(terminal), *where).order_by(Job.id)
    return list(session.scalars(query.with_for_update()))


def _active_notebooks(session: Session, *where: Any) -> list[NotebookRow]:
    active = [state.value for state in NotebookState if state.active]
    query = select(NotebookRow).where(NotebookRow.state.in_(active), *where)
    return list(session.scalars(query.order_by(NotebookRow.id).with_for_update()))


def of_tenant(session: Session, tenant: str) -> Holdings:
    """Everything ``tenant`` still holds."""
    services = session.scalars(
        select(ServiceRow).where(ServiceRow.tenant == tenant).order_by(ServiceRow.id)
    )
    return Holdings(
        jobs=_unfinished(session, Job.tenant == tenant),
        services=list(services),
        notebooks=_active_notebooks(session, NotebookRow.tenant == tenant),
    )


def of_queue(session: Session, tenant: str, queue: str) -> Holdings:
    """What queue ``queue`` (of ``tenant``) still holds: its unfinished jobs, the services whose
    spec or a revision still in use names it or that have a replica in it, and the active
    notebooks whose run is in it."""
    with_replicas = set(
        session.scalars(
            select(ServiceReplica.service_id)
            .join(Job, Job.id == ServiceReplica.job_id)
            .where(Job.queue == queue, Job.state.not_in([s.value for s in TERMINAL]))
        )
    )
    services = []
    for service in session.scalars(
        select(ServiceRow).where(ServiceRow.tenant == tenant).order_by(ServiceRow.id)
    ):
        revisions = session.scalars(
            select(ServiceRevision).where(
                ServiceRevision.service_id == service.id,
                ServiceRevision.state != RevisionState.RETIRED.value,
            )
        )
        specs = [service.spec, *(r.spec for r in revisions)]
        if service.id in with_replicas or any(_queue_of(spec) == queue for spec in specs):
            services.append(service)
    return Holdings(
        jobs=_unfinished(session, Job.queue == queue),
        services=services,
        notebooks=_active_notebooks(
            session,
            NotebookRow.job_id.in_(select(Job.id).where(Job.queue == queue)),
        ),
    )


def _queue_of(spec: dict[str, Any]) -> str | None:
    queue = spec.get("queue")
    return queue if isinstance(queue, str) else None


def drain(
    session: Session,
    principal: Principal,
    holdings: Holdings,
    what: str,
    drain: bool,
    at: float,
) -> Deletion | None:
    """None when ``holdings`` is empty (delete now); else Conflict naming them (no ``drain``),
    or the drain's progress: services deleted, notebooks stopped, other jobs cancelled."""
    if holdings.empty:
        return None
    if not drain:
        raise Conflict(
            f"{what} holds {holdings.describe()}; end them, or delete with drain (--drain) to "
            "cancel its jobs, stop its notebooks and delete its services, and delete "
            f"{what} once they have ended"
        )
    said = f"{principal.member} to delete {what}"
    ending = {j.id for j in holdings.jobs if JobState(j.state) is JobState.STOPPING}
    for service in holdings.services:
        if service.deleted_at is None:
            serving.delete(session, principal, service.name, at, tenant=service.tenant)
    for notebook in holdings.notebooks:
        notebooks.stop_run(
            session,
            notebook,
            NotebookState.STOPPED,
            JobEventReason.NOTEBOOK_STOPPED,
            f"stopped by {said}",
            at,
        )
    for job in holdings.jobs:
        state = JobState(job.state)
        if not state.terminal and state is not JobState.STOPPING:
            stop_unended(session, job, f"cancelled by {said}", at)
    cancelled = len(holdings.jobs) - len(ending)
    left = sum(1 for j in holdings.jobs if not JobState(j.state).terminal)
    # a deleted service's row goes once the serving controller has seen its replicas end
    removing = tuple(sorted(s.name for s in holdings.services))
    if left == 0 and not removing:
        return None
    return Deletion(deleted=False, stopping=left, cancelled=cancelled, services=removing)
