"""The service controller's observation: every service, its revisions and replica jobs,
copied from the store into plain values (``serving_plan``'s views) in one short read."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.control.serving_plan import ReplicaView, RevisionView, ServiceView
from kiban.control.settling import replica_ref
from kiban.domain.rollout import RevisionState
from kiban.domain.states import JobState
from kiban.services.serving import stored_spec
from kiban.store.models import Job, Replica
from kiban.store.models_serving import ServiceReplica, ServiceRevision, ServiceRow


def observe_services(session: Session) -> list[ServiceView]:
    """Every service, its revisions and its replica jobs (with their launched replica), as
    plain values: three queries, in the caller's short read transaction."""
    services = session.scalars(select(ServiceRow).order_by(ServiceRow.id)).all()
    revisions: dict[int, list[RevisionView]] = {}
    query = select(ServiceRevision).order_by(ServiceRevision.service_id, ServiceRevision.number)
    for revision in session.scalars(query):
        revisions.setdefault(revision.service_id, []).append(_revision_view(revision))
    replicas: dict[int, list[ReplicaView]] = {}
    rows = session.execute(
        select(ServiceReplica, Job, Replica)
        .join(Job, Job.id == ServiceReplica.job_id)
        .outerjoin(
            Replica,
            (Replica.job_id == Job.id) & (Replica.attempt == Job.attempt) & Replica.active,
        )
        .order_by(ServiceReplica.service_id, ServiceReplica.index)
    ).all()
    for row, job, launched in rows:
        replicas.setdefault(row.service_id, []).append(
            ReplicaView(
                job_id=job.id,
                revision_id=row.revision_id,
                index=row.index,
                job_state=JobState(job.state),
                job_message=job.message,
                master_port=job.master_port,
                launched=None if launched is None else replica_ref(launched),
                ready=row.ready,
                ever_ready=row.ever_ready,
                ended=row.ended,
            )
        )
    return [
        ServiceView(
            id=service.id,
            name=service.name,
            tenant=service.tenant,
            spec=stored_spec(service),
            revisions=tuple(revisions.get(service.id, ())),
            replicas=tuple(replicas.get(service.id, ())),
            stable_revision=service.stable_revision,
            canary_revision=service.canary_revision,
            canary_percent=service.canary_percent,
            deleted=service.deleted_at is not None,
        )
        for service in services
    ]


def _revision_view(revision: ServiceRevision) -> RevisionView:
    return RevisionView(
        id=revision.id,
        number=revision.number,
        state=RevisionState(revision.state),
        spec=stored_spec(revision),
        crashes=revision.crashes,
        ready_at=revision.ready_at,
        desired_replicas=revision.desired_replicas,
    )
