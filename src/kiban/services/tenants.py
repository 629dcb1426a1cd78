"""Tenants (teams), their queues and their members' tokens."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kiban.domain.jobspec import DNS_LABEL, check_dns_label
from kiban.domain.states import JobState
from kiban.services import events, policy
from kiban.services.auth import Principal, create_token
from kiban.services.errors import Conflict, NotFound, invalid
from kiban.store.models import Job, Queue, Replica, Tenant

MAX_TOKEN_NAME = 128  # the width of api_tokens.name


def _check_name(value: str, field_path: str) -> str:
    try:
        return check_dns_label(value, "name")
    except ValueError as exc:
        raise invalid(field_path, str(exc)) from None


def create_tenant(session: Session, principal: Principal, name: str, at: float) -> Tenant:
    principal.require_admin()
    _check_name(name, "name")
    if session.get(Tenant, name) is not None:
        raise Conflict(f"tenant {name} already exists")
    tenant = Tenant(name=name, created_at=at)
    session.add(tenant)
    events.record(
        session,
        kind="Tenant",
        name=name,
        tenant=name,
        reason="Created",
        message=f"tenant {name} created by {principal.name}",
        at=at,
    )
    return tenant


def list_tenants(session: Session, principal: Principal) -> list[Tenant]:
    query = select(Tenant).order_by(Tenant.name)
    if not principal.is_admin:
        query = query.where(Tenant.name == principal.tenant)
    return list(session.scalars(query))


def create_member_token(
    session: Session, principal: Principal, tenant: str, name: str, at: float
) -> str:
    principal.require_admin()
    if not DNS_LABEL.match(tenant) or session.get(Tenant, tenant) is None:
        raise NotFound(f"tenant {tenant} not found")
    if not name.strip():
        raise invalid("name", "a token needs a name (for example the member's user name)")
    if len(name) > MAX_TOKEN_NAME:
        raise invalid("name", f"at most {MAX_TOKEN_NAME} characters")
    if not name.isprintable():
        raise invalid("name", "must not contain control characters")
    return create_token(session, name=name, tenant=tenant, admin=False, at=at)


def create_queue(
    session: Session,
    principal: Principal,
    *,
    name: str,
    tenant: str,
    gpu_quota: int | None = None,
    strategy: str = "StrictFIFO",
    at: float,
    **entry: Any,
) -> Queue:
    """Add a queue to the policy (a new version); ``entry`` holds its other policy keys.

    ``gpu_quota`` is the quota of a policy without flavors; with flavors, give ``quota`` per
    flavor instead (``quota={"h100": {"gpu": 8}}``).
    """
    document: dict[str, Any] = {"name": name, "tenant": tenant, "strategy": strategy, **entry}
    if gpu_quota is not None:
        document["quota"] = {"gpu": gpu_quota}
    return policy.add_queue(session, principal, document, at)


def list_queues(session: Session, principal: Principal) -> list[Queue]:
    query = select(Queue).order_by(Queue.name)
    if not principal.is_admin:
        query = query.where(Queue.tenant == principal.tenant)
    return list(session.scalars(query))


def queue_usage(session: Session) -> dict[str, dict[str, int]]:
    """Per queue: GPUs in use by admitted/running jobs, and jobs pending and running."""
    usage: dict[str, dict[str, int]] = {}
    rows = session.execute(
        select(Job.queue, Job.state, func.count()).group_by(Job.queue, Job.state)
    ).all()
    for queue, state, count in rows:
        entry = usage.setdefault(queue, {"gpus_in_use": 0, "pending": 0, "running": 0})
        if state == JobState.PENDING.value:
            entry["pending"] += count
        elif JobState(state).holds_resources:
            entry["running"] += count
    gpu_rows = session.execute(
        select(Job.queue, Replica.gpu_ids)
        .join(Replica, Replica.job_id == Job.id)
        .where(Replica.active.is_(True))
    ).all()
    for queue, gpu_ids in gpu_rows:
        usage.setdefault(queue, {"gpus_in_use": 0, "pending": 0, "running": 0})
        usage[queue]["gpus_in_use"] += len(gpu_ids or [])
    return usage
