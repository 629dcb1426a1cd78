"""What ``kiban services`` and ``kiban describe service`` show: revisions, replicas, traffic."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.domain.rollout import (
    RevisionState,
    TrafficTargets,
    revision_name,
    serving_revisions,
    traffic_split,
)
from kiban.domain.service import ServiceSpec
from kiban.domain.states import JobState
from kiban.services.serving import revisions_of, stored_spec
from kiban.serving.capacity import replica_concurrency
from kiban.store.models import Job, Replica
from kiban.store.models_serving import ServiceReplica, ServiceRevision, ServiceRow


@dataclass(frozen=True)
class ReplicaStatus:
    job_id: str
    revision: str
    state: str
    node: str | None
    ready: bool
    reason: str | None


@dataclass(frozen=True)
class RevisionStatus:
    name: str
    number: int
    state: str
    message: str
    traffic_percent: int
    desired_replicas: int
    ready_replicas: int
    created_at: float
    ready_at: float | None
    role: str  # stable, canary, or "" when it takes no traffic
    replica_concurrency: int
    """Requests the router sends one of its replicas at once (0: no cap): its own model
    server's batch size counts, the service's containerConcurrency otherwise."""


@dataclass(frozen=True)
class ServiceStatus:
    row: ServiceRow
    spec: ServiceSpec
    state: str
    revisions: tuple[RevisionStatus, ...]
    replicas: tuple[ReplicaStatus, ...]
    traffic: dict[str, int]


def _state(row: ServiceRow, revisions: list[RevisionStatus], traffic: dict[str, int]) -> str:
    """Ready when a revision taking traffic has a ready replica; else why not."""
    if row.deleted_at is not None:
        return "Deleting"
    serving = [r for r in revisions if r.name in traffic]
    if any(r.ready_replicas for r in serving):
        return "Ready"
    if any(r.state == RevisionState.LOADING.value for r in serving):
        return "Loading"
    if any(r.state == RevisionState.READY.value for r in serving):
        return "ScaledToZero" if all(r.desired_replicas == 0 for r in serving) else "Loading"
    return "Failed"


def _reason(job: Job, waiting: str | None) -> str | None:
    """Why a replica does not serve yet: its job's pending reason, or what it waits for while
    running (its image being pulled)."""
    if job.state == JobState.PENDING.value:
        return job.reason_code
    return waiting if job.state == JobState.RUNNING.value else None


def service_status(session: Session, row: ServiceRow) -> ServiceStatus:
    revisions = revisions_of(session, row)
    pairs = session.execute(
        select(ServiceReplica, Job)
        .join(Job, Job.id == ServiceReplica.job_id)
        .where(ServiceReplica.service_id == row.id)
        .order_by(ServiceReplica.revision_id, ServiceReplica.index)
    ).all()
    by_id: dict[int, ServiceRevision] = {r.id: r for r in revisions}
    launched = {
        job_id: (node, waiting)
        for job_id, node, waiting in session.execute(
            select(Replica.job_id, Replica.node, Replica.waiting).where(
                Replica.job_id.in_([job.id for _, job in pairs]), Replica.active
            )
        ).all()
    }
    ready: dict[int, int] = {}
    replicas = []
    for replica, job in pairs:
        if JobState(job.state).terminal:
            continue
        revision = by_id[replica.revision_id]
        ready[revision.number] = ready.get(revision.number, 0) + int(replica.ready)
        node, waiting = launched.get(job.id, (None, None))
        replicas.append(
            ReplicaStatus(
                job_id=job.id,
                revision=revision_name(row.name, revision.number),
                state=job.state,
                node=node,
                ready=replica.ready,
                reason=_reason(job, waiting),
            )
        )
    targets = TrafficTargets(row.stable_revision, row.canary_revision, row.canary_percent)
    serving = serving_revisions((r.number, r.state, bool(ready.get(r.number))) for r in revisions)
    split = traffic_split(targets, serving) if row.deleted_at is None else {}
    traffic = {revision_name(row.name, n): share for n, share in split.items()}
    spec = stored_spec(row)
    statuses = [
        RevisionStatus(
            name=revision_name(row.name, r.number),
            number=r.number,
            state=r.state,
            message=r.message,
            traffic_percent=split.get(r.number, 0),
            desired_replicas=r.desired_replicas,
            ready_replicas=ready.get(r.number, 0),
            created_at=r.created_at,
            ready_at=r.ready_at,
            role="stable"
            if r.number == row.stable_revision
            else "canary"
            if r.number == row.canary_revision
            else "",
            replica_concurrency=replica_concurrency(spec.with_revision(stored_spec(r))),
        )
        for r in revisions
    ]
    return ServiceStatus(
        row=row,
        spec=spec,
        state=_state(row, statuses, traffic),
        revisions=tuple(statuses),
        replicas=tuple(replicas),
        traffic=traffic,
    )
