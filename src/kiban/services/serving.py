"""Inference services: apply a manifest (making revisions), promote, roll back, delete, read.

The replicas themselves are jobs that the service controller (``kiban.control.serving_controller``)
creates and cancels; this module only changes what the controller aims for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.errors import FieldProblem, SpecError
from kiban.domain.event_reasons import ServiceEventReason
from kiban.domain.manifests import json_problem
from kiban.domain.rollout import RevisionState, revision_name
from kiban.domain.service import ServiceSpec, parse_service_submission
from kiban.domain.service_replica import replica_job_manifest
from kiban.services import events
from kiban.services.auth import Principal
from kiban.services.errors import Conflict, InvalidInput, NotFound, invalid
from kiban.services.jobs import ClusterFacts, check_against_cluster, check_against_policy
from kiban.services.model_checks import RUNTIME_ARGS, model_path_check
from kiban.services.policy import current_policy
from kiban.services.service_warnings import (
    container_field_warnings,
    runtime_arg_warnings,
    scaling_warnings,
)
from kiban.store.models import Queue
from kiban.store.models_serving import ServiceRevision, ServiceRow

_NAME = re.compile(r"^[a-z0-9][-a-z0-9]{0,62}$")
SERVING_PRIORITY_CLASS = "serving"


def service_event(
    session: Session,
    service: ServiceRow,
    *,
    reason: ServiceEventReason,
    message: str,
    at: float,
    warning: bool = False,
) -> None:
    """Record an event of a service (its tenant's to see)."""
    events.record(
        session,
        kind="Service",
        name=service.name,
        tenant=service.tenant,
        reason=reason,
        message=message,
        at=at,
        warning=warning,
    )


def stored_spec(row: ServiceRow | ServiceRevision) -> ServiceSpec:
    """The normalized spec kept with a service or a revision."""
    return ServiceSpec.model_validate(row.spec)


def spec_document(spec: ServiceSpec) -> dict[str, Any]:
    return spec.to_document()


def serving_priority_class(spec: ServiceSpec, policy: ClusterPolicy) -> str | None:
    """The class a replica runs at: the service's own, else ``serving`` when the policy has it
    (serving ranks above training by default), else the policy's default."""
    if spec.priority_class is not None:
        return spec.priority_class
    if policy.priority(SERVING_PRIORITY_CLASS) is not None:
        return SERVING_PRIORITY_CLASS
    return None


@dataclass(frozen=True)
class Applied:
    """What ``apply`` did: the service, the revision it made (None: no new one), warnings."""

    service: ServiceRow
    revision: ServiceRevision | None
    created: bool
    warnings: tuple[str, ...]


def _check(
    session: Session,
    principal: Principal,
    spec: ServiceSpec,
    name: str,
    *,
    facts: ClusterFacts,
    policy: ClusterPolicy,
) -> Queue:
    """The queue the service's replicas go to, once its spec passes every submission check."""
    queue = session.get(Queue, spec.queue)
    if queue is None or not principal.can_see(queue.tenant):
        raise invalid("spec.queue", f"queue {spec.queue} does not exist")
    replica = replica_job_manifest(
        service=name,
        revision=revision_name(name, 1),
        index=0,
        spec=spec.model_copy(update={"priority_class": serving_priority_class(spec, policy)}),
    )
    try:
        check_against_policy(replica, policy)
        check_against_cluster(replica, facts)
    except SpecError as exc:
        # The replica's fields are the service's: point at the service's own keys.
        problems = [
            FieldProblem(p.field.replace("spec.tasks[0].resources", "spec.resources"), p.message)
            for p in exc.problems
        ]
        raise InvalidInput(problems) from None
    return queue


def apply(
    session: Session,
    principal: Principal,
    document: dict[str, Any],
    *,
    facts: ClusterFacts,
    at: float,
) -> Applied:
    """Create a service, or change one: a changed template makes a new revision that takes
    ``canaryTrafficPercent`` of the traffic (all of it, once ready, when none is given)."""
    problem = json_problem(document)
    if problem is not None:
        raise invalid(*problem)
    checks = (RUNTIME_ARGS, model_path_check(facts))
    try:  # every problem of the manifest in one answer, the args' and the model path's included
        submission = parse_service_submission(document, checks)
    except SpecError as exc:
        raise InvalidInput(exc.problems) from None
    spec, name = submission.spec, submission.name
    policy = current_policy(session)
    queue = _check(session, principal, spec, name, facts=facts, policy=policy)
    service = session.scalar(
        select(ServiceRow).where(ServiceRow.tenant == queue.tenant, ServiceRow.name == name)
    )
    if service is not None and service.deleted_at is not None:
        raise Conflict(f"service {name} is being deleted; apply it again once it is gone")
    created = service is None
    if service is None:
        service = ServiceRow(
            tenant=queue.tenant,
            name=name,
            document=document,
            spec=spec_document(spec),
            created_at=at,
            updated_at=at,
            revisions_made=0,
            canary_percent=0,
        )
        session.add(service)
        session.flush()
    else:
        service.document = document
        service.spec = spec_document(spec)
        service.updated_at = at
    latest = _latest_live(session, service)
    revision = None
    if latest is None or latest.template_key != spec.template_key():
        revision = _new_revision(session, service, spec, at)
        if service.canary_revision is not None and service.canary_revision != revision.number:
            _retire(session, service, service.canary_revision, at, "replaced by a newer revision")
        service.canary_revision = revision.number
        service.canary_percent = (
            100
            if spec.canary_traffic_percent is None or service.stable_revision is None
            else spec.canary_traffic_percent
        )
    elif service.canary_revision is not None and spec.canary_traffic_percent is not None:
        service.canary_percent = spec.canary_traffic_percent
    service_event(
        session,
        service,
        reason=ServiceEventReason.CREATED if created else ServiceEventReason.UPDATED,
        message=f"applied by {principal.name}"
        + (f"; revision {revision_name(name, revision.number)}" if revision else "")
        + (f" takes {service.canary_percent}% once ready" if revision else "; no new revision"),
        at=at,
    )
    warnings = (
        *submission.warnings,
        *scaling_warnings(spec, facts.capabilities),
        *runtime_arg_warnings(submission),
        *container_field_warnings(submission, facts),
    )
    if warnings:
        service_event(
            session,
            service,
            reason=ServiceEventReason.APPLIED_WITH_WARNINGS,
            message="; ".join(warnings),
            at=at,
            warning=True,
        )
    return Applied(service, revision, created, warnings)


def _new_revision(
    session: Session, service: ServiceRow, spec: ServiceSpec, at: float
) -> ServiceRevision:
    service.revisions_made += 1
    revision = ServiceRevision(
        service_id=service.id,
        number=service.revisions_made,
        template_key=spec.template_key(),
        spec=spec_document(spec),
        state=RevisionState.LOADING.value,
        message="",
        created_at=at,
        desired_replicas=0,
        crashes=0,
    )
    session.add(revision)
    session.flush()
    return revision


def revisions_of(session: Session, service: ServiceRow) -> list[ServiceRevision]:
    query = (
        select(ServiceRevision)
        .where(ServiceRevision.service_id == service.id)
        .order_by(ServiceRevision.number)
    )
    return list(session.scalars(query))


def revision_by_number(
    session: Session, service: ServiceRow, number: int | None
) -> ServiceRevision | None:
    if number is None:
        return None
    return session.scalar(
        select(ServiceRevision).where(
            ServiceRevision.service_id == service.id, ServiceRevision.number == number
        )
    )


def _latest_live(session: Session, service: ServiceRow) -> ServiceRevision | None:
    """The revision a new spec is compared with: the canary, else the stable one."""
    for number in (service.canary_revision, service.stable_revision):
        revision = revision_by_number(session, service, number)
        if revision is not None:
            return revision
    return None


def _retire(session: Session, service: ServiceRow, number: int, at: float, why: str) -> None:
    revision = revision_by_number(session, service, number)
    if revision is None or revision.state == RevisionState.RETIRED.value:
        return
    if revision.state != RevisionState.FAILED.value:
        revision.state = RevisionState.RETIRED.value
        revision.message = why
    service_event(
        session,
        service,
        reason=ServiceEventReason.REVISION_RETIRED,
        message=f"revision {revision_name(service.name, number)} retired: {why}",
        at=at,
    )


def get_visible(
    session: Session, principal: Principal, name: str, tenant: str | None = None
) -> ServiceRow:
    """The service of that name the caller may see; an admin names the tenant when two have it."""
    if not _NAME.match(name):
        raise NotFound(f"service {name} not found")
    query = select(ServiceRow).where(ServiceRow.name == name)
    if not principal.is_admin:
        query = query.where(ServiceRow.tenant == principal.tenant)
    elif tenant:
        query = query.where(ServiceRow.tenant == tenant)
    rows = list(session.scalars(query))
    if not rows:
        raise NotFound(f"service {name} not found")
    if len(rows) > 1:
        tenants = ", ".join(sorted(r.tenant for r in rows))
        raise Conflict(f"tenants {tenants} each have a service {name}; name the tenant")
    return rows[0]


def list_services(session: Session, principal: Principal) -> list[ServiceRow]:
    query = select(ServiceRow).order_by(ServiceRow.tenant, ServiceRow.name)
    if not principal.is_admin:
        query = query.where(ServiceRow.tenant == principal.tenant)
    return list(session.scalars(query))


def promote(session: Session, principal: Principal, name: str, at: float) -> ServiceRow:
    """Send all traffic to the canary, which must be ready; the old stable one retires."""
    service = get_visible(session, principal, name)
    canary = revision_by_number(session, service, service.canary_revision)
    if canary is None:
        raise Conflict(f"service {name} has no canary revision to promote")
    if canary.state != RevisionState.READY.value:
        raise Conflict(
            f"revision {revision_name(name, canary.number)} is {canary.state}, not Ready; "
            "it can be promoted once a replica serves"
        )
    promote_canary(session, service, at, by=principal.name)
    return service


def promote_canary(session: Session, service: ServiceRow, at: float, *, by: str) -> None:
    """Make the canary the stable revision (by a user, or by a rollout that reached 100%)."""
    number = service.canary_revision
    assert number is not None
    old = service.stable_revision
    service.stable_revision, service.canary_revision, service.canary_percent = number, None, 0
    if old is not None and old != number:
        _retire(session, service, old, at, f"{revision_name(service.name, number)} promoted")
    service_event(
        session,
        service,
        reason=ServiceEventReason.PROMOTED,
        message=f"revision {revision_name(service.name, number)} takes all traffic ({by})",
        at=at,
    )


def rollback(session: Session, principal: Principal, name: str, at: float) -> ServiceRow:
    """Drop the canary (traffic back to stable); with no canary, bring back the revision
    before the stable one, as a canary that takes all traffic once ready."""
    service = get_visible(session, principal, name)
    if service.canary_revision is not None:
        if service.stable_revision is None:
            raise Conflict(f"service {name} has no earlier revision to roll back to")
        dropped = service.canary_revision
        service.canary_revision, service.canary_percent = None, 0
        _retire(session, service, dropped, at, f"rolled back by {principal.name}")
        return service
    earlier = [
        r
        for r in revisions_of(session, service)
        if service.stable_revision is not None
        and r.number < service.stable_revision
        and r.state != RevisionState.FAILED.value
    ]
    if not earlier:
        raise Conflict(f"service {name} has no earlier revision to roll back to")
    back = earlier[-1]
    back.state, back.message, back.crashes = RevisionState.LOADING.value, "", 0
    service.canary_revision, service.canary_percent = back.number, 100
    service_event(
        session,
        service,
        reason=ServiceEventReason.ROLLED_BACK,
        message=f"revision {revision_name(name, back.number)} comes back ({principal.name}); "
        "it takes all traffic once ready",
        at=at,
    )
    return service


def delete(
    session: Session, principal: Principal, name: str, at: float, tenant: str | None = None
) -> ServiceRow:
    """Retire every revision; the controller stops the replicas and then drops the service.
    An admin names the ``tenant`` when two have a service of that name."""
    service = get_visible(session, principal, name, tenant)
    for number in (service.canary_revision, service.stable_revision):
        if number is not None:
            _retire(session, service, number, at, f"service deleted by {principal.name}")
    service.stable_revision = service.canary_revision = None
    service.canary_percent = 0
    service.deleted_at = at
    service_event(
        session,
        service,
        reason=ServiceEventReason.DELETED,
        message=f"deleted by {principal.name}; its replicas stop",
        at=at,
    )
    return service
