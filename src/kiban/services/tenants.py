"""Tenants (teams), their queues and their members' tokens: creating, listing, deleting.

Who may do what (``kiban.domain.roles``): admins everything; a tenant-admin their own tenant's
tokens (member and viewer ones; never a tenant-admin's or an admin's) and queues: they delete
them here, and create them and change their quota, weight and strategy within the limits
admins set (``kiban.services.queue_admin``).

Deleting a tenant or a queue is refused (409) while it holds unfinished jobs, services or
active notebooks (``kiban.services.draining``); with ``drain`` its services are deleted, its
notebooks stopped and its jobs cancelled, and the answer says what is still ending: ask again
once it has (``kiban admin delete-tenant --drain`` waits). A deleted tenant keeps its row, marked
deleted, for its finished jobs' and usage's history; its tokens are revoked and its queues
leave the policy. Creating it again restores it (not its tokens: they stay revoked).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from kiban.domain.jobspec import DNS_LABEL, check_dns_label
from kiban.domain.quantity import parse_duration
from kiban.domain.roles import GRANTABLE_BY_TENANT_ADMIN, TOKEN_ROLES, Role
from kiban.domain.states import JobState
from kiban.services import draining, events, policy
from kiban.services.auth import Principal, create_token, hash_token
from kiban.services.draining import Deletion
from kiban.services.errors import Conflict, Forbidden, NotFound, invalid
from kiban.store.models import ApiToken, Job, Queue, Replica, Tenant

MAX_TOKEN_NAME = 128  # the width of api_tokens.name


def _check_name(value: str, field_path: str) -> str:
    try:
        return check_dns_label(value, "name")
    except ValueError as exc:
        raise invalid(field_path, str(exc)) from None


def create_tenant(session: Session, principal: Principal, name: str, at: float) -> Tenant:
    principal.require_admin()
    _check_name(name, "name")
    tenant = session.get(Tenant, name)
    if tenant is not None and tenant.deleted_at is None:
        raise Conflict(f"tenant {name} already exists")
    if tenant is None:
        tenant = Tenant(name=name, created_at=at)
        session.add(tenant)
    else:  # deleted before: restored, its history with it
        tenant.created_at, tenant.deleted_at = at, None
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
    query = select(Tenant).where(Tenant.deleted_at.is_(None)).order_by(Tenant.name)
    if not principal.is_admin:
        query = query.where(Tenant.name == principal.tenant)
    return list(session.scalars(query))


def live_tenant(session: Session, name: str) -> Tenant:
    """The tenant ``name`` unless it does not exist or was deleted (NotFound)."""
    tenant = session.get(Tenant, name) if DNS_LABEL.match(name) else None
    if tenant is None or tenant.deleted_at is not None:
        raise NotFound(f"tenant {name} not found")
    return tenant


def create_member_token(
    session: Session,
    principal: Principal,
    tenant: str,
    name: str,
    at: float,
    role: str = Role.MEMBER.value,
    expires: str | float | None = None,
) -> str:
    """A new token of ``tenant``'s member ``name`` with ``role``, expiring ``expires`` from
    now (a duration: ``30d``, or seconds; None: never); in clear, the only time it is seen."""
    principal.require_tenant_admin(tenant, "creating tokens")
    live_tenant(session, tenant)
    if not name.strip():
        raise invalid("name", "a token needs a name (for example the member's user name)")
    if len(name) > MAX_TOKEN_NAME:
        raise invalid("name", f"at most {MAX_TOKEN_NAME} characters")
    if not name.isprintable():
        raise invalid("name", "must not contain control characters")
    granted = _token_role(role)
    if not principal.is_admin and granted not in GRANTABLE_BY_TENANT_ADMIN:
        raise Forbidden(
            f"a token with the {granted.value} role needs an admin to create it (a "
            f"tenant-admin may create member and viewer tokens); this token is "
            f"{principal.describe()}"
        )
    expires_at = None if expires is None else at + _lifetime(expires)
    return create_token(
        session,
        name=name,
        tenant=tenant,
        role=granted,
        at=at,
        expires_at=expires_at,
        created_by=principal.member[:MAX_TOKEN_NAME],
    )


def token_row(session: Session, token: str) -> ApiToken:
    """The row of a token just made (its id, role, expiry: what its creator is told)."""
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token)))
    assert row is not None
    return row


def _token_role(text: str) -> Role:
    try:
        role = Role(text)
    except ValueError:
        role = None
    if role not in TOKEN_ROLES:
        choices = ", ".join(r.value for r in TOKEN_ROLES)
        raise invalid("role", f"{text!r} is not a role; expected one of {choices}")
    assert role is not None
    return role


def _lifetime(expires: str | float) -> float:
    try:
        seconds = parse_duration(expires)
    except (TypeError, ValueError) as exc:
        raise invalid("expires", str(exc)) from None
    if not seconds > 0:
        raise invalid("expires", f"must be a positive duration, not {expires!r}")
    return seconds


def list_tokens(
    session: Session, principal: Principal, tenant: str | None, revoked: bool = False
) -> list[ApiToken]:
    """The tokens of ``tenant`` (None: every tenant's, for an admin; a tenant-admin's own
    tenant's), oldest first, the revoked ones too with ``revoked``; never a job's token (they
    live and end with their job)."""
    if tenant is None and not principal.is_admin:
        tenant = principal.tenant or ""
    if tenant is not None:
        principal.require_tenant_admin(tenant, "listing tokens")
    query = select(ApiToken).where(ApiToken.role != Role.JOB.value).order_by(ApiToken.id)
    if not revoked:
        query = query.where(ApiToken.revoked_at.is_(None))
    if tenant is not None:
        query = query.where(ApiToken.tenant == tenant)
    return list(session.scalars(query))


def revoke_token(session: Session, principal: Principal, token_id: int, at: float) -> ApiToken:
    """Revoke a token: refused from its next request on, its row kept (who had access). An
    admin any; a tenant-admin their tenant's member and viewer tokens and their own (another
    tenant's: NotFound, as if absent). Revoked already: Conflict."""
    row = session.get(ApiToken, token_id, with_for_update=True)
    if row is None or row.role == Role.JOB.value or not principal.can_see(row.tenant):
        raise NotFound(f"token {token_id} not found")
    principal.require_tenant_admin(row.tenant or "", "revoking tokens")
    if row.revoked_at is not None:
        raise Conflict(f"token {row.id} of {row.name} was revoked already, by {row.revoked_by}")
    own = row.id == principal.token_id
    if not principal.is_admin and not own and Role(row.role) not in GRANTABLE_BY_TENANT_ADMIN:
        raise Forbidden(
            f"revoking a token with the {row.role} role needs an admin; this token is "
            f"{principal.describe()}"
        )
    if row.role == Role.ADMIN.value and _admin_tokens(session) <= 1:
        raise Conflict(
            f"token {row.id} is the last admin token: revoking it would leave nobody able to "
            "administer the cluster; create another admin token first"
        )
    row.revoked_at, row.revoked_by = at, principal.member[:MAX_TOKEN_NAME]
    events.record(
        session,
        kind="Tenant",
        name=row.tenant or "admin",
        tenant=row.tenant,
        reason="TokenRevoked",
        message=f"token {row.id} of {row.name} ({row.role}) revoked by {principal.member}",
        at=at,
    )
    return row


def _admin_tokens(session: Session) -> int:
    return (
        session.scalar(
            select(func.count())
            .select_from(ApiToken)
            .where(ApiToken.role == Role.ADMIN.value, ApiToken.revoked_at.is_(None))
        )
        or 0
    )


def delete_tenant(
    session: Session, principal: Principal, name: str, at: float, drain: bool = False
) -> Deletion:
    """Delete a tenant (see the module's docstring); admins only."""
    principal.require_admin()
    tenant = live_tenant(session, name)
    holdings = draining.of_tenant(session, name)
    progress = draining.drain(session, principal, holdings, f"tenant {name}", drain, at)
    if progress is not None:
        return progress
    record = policy.current_record(session)
    queues = list(record.document.get("queues", []))
    kept = [q for q in queues if not (isinstance(q, dict) and q.get("tenant") == name)]
    if len(kept) != len(queues):
        document = {**record.document, "queues": kept}
        policy.apply_policy(
            session, document, actor=f"{principal.member} (delete tenant {name})", at=at
        )
    session.execute(
        delete(ApiToken).where(ApiToken.tenant == name, ApiToken.role == Role.JOB.value)
    )
    session.execute(
        update(ApiToken)
        .where(ApiToken.tenant == name, ApiToken.revoked_at.is_(None))
        .values(revoked_at=at, revoked_by=principal.member[:MAX_TOKEN_NAME])
    )
    tenant.deleted_at = at
    events.record(
        session,
        kind="Tenant",
        name=name,
        tenant=name,
        reason="Deleted",
        message=f"tenant {name} deleted by {principal.member}",
        at=at,
    )
    return Deletion(deleted=True)


def own_queue(session: Session, principal: Principal, name: str, what: str) -> Queue:
    """The queue ``name`` if the caller may see it (NotFound otherwise) and manage it."""
    queue = session.get(Queue, name) if DNS_LABEL.match(name) else None
    if queue is None or not principal.can_see(queue.tenant):
        raise NotFound(f"queue {name} not found")
    principal.require_tenant_admin(queue.tenant, what)
    return queue


def delete_queue(
    session: Session, principal: Principal, name: str, at: float, drain: bool = False
) -> Deletion:
    """Remove a queue from the policy (a new version): an admin, or its tenant's tenant-admin."""
    queue = own_queue(session, principal, name, "deleting queues")
    holdings = draining.of_queue(session, queue.tenant, name)
    progress = draining.drain(session, principal, holdings, f"queue {name}", drain, at)
    if progress is not None:
        return progress
    record = policy.current_record(session)
    queues = list(record.document.get("queues", []))
    kept = [q for q in queues if not (isinstance(q, dict) and q.get("name") == queue.name)]
    document = {**record.document, "queues": kept}
    policy.apply_policy(session, document, actor=f"{principal.member} (delete queue {name})", at=at)
    return Deletion(deleted=True)


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
