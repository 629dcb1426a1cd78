"""Creating a queue and changing its settings, each a new policy version: by admins, and by a
tenant's tenant-admins within the limits admins set.

A tenant-admin may, for their own tenant only (another tenant's queue is answered 404, as if
absent): create a queue, which must have a quota (a queue without quota has no limit at all),
and change their queues' ``quota``, ``fairShareWeight``, ``strategy`` and ``scavenger`` (a
scavenger queue only uses idle capacity: it takes nothing from others), while the tenant's
queues stay within its ceiling (``kiban.domain.tenant_limits``); above it the change is
refused (403) naming the field, the ceiling and the total that would result; the first such
change writes the ceiling it was held to into ``tenantLimits``. What reaches
other tenants stays the admins': ``cohort``, ``borrowingLimit``, ``lendingLimit``, a
time-bounded ``allocation``, another ``tenant`` (403 naming the field). Admins are not held to
ceilings: they set them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy, QueueDecl
from kiban.domain.declarations import DEFAULT_QUEUE_ENTRY
from kiban.domain.errors import FieldProblem
from kiban.domain.roles import Capability
from kiban.domain.tenant_limits import (
    Ceiling,
    ceiling_of,
    excesses,
    quota_field,
    tenant_totals,
    undeclared_parts,
)
from kiban.services import policy
from kiban.services.auth import Principal
from kiban.services.errors import Conflict, Forbidden, InvalidInput, invalid
from kiban.services.tenants import own_queue
from kiban.store.models import Queue

CHANGEABLE = (
    "strategy",
    "quota",
    "fairShareWeight",
    "scavenger",
    "cohort",
    "borrowingLimit",
    "lendingLimit",
)
"""The keys of a queue's entry that ``PATCH /queues/{name}`` changes."""

ADMINS_ONLY = ("cohort", "borrowingLimit", "lendingLimit", "allocation")
"""The keys of a queue's entry that reach other tenants: only admins set them."""


def create_queue(session: Session, principal: Principal, entry: dict[str, Any], at: float) -> Queue:
    """``POST /queues``: a new policy version with one more queue (entry as in ``queues``)."""
    if principal.is_admin:
        return policy.add_queue(session, principal, entry, at)
    principal.require(Capability.MANAGE_TENANT, "creating queues")
    tenant = entry.get("tenant")
    if tenant != principal.tenant:
        raise Forbidden(
            f"creating queues of tenant {tenant} needs an admin token or a tenant-admin of "
            f"{tenant}; this token is {principal.describe()}",
            [FieldProblem("tenant", "a tenant-admin creates queues of their own tenant only")],
        )
    _admins_only(principal, [key for key in ADMINS_ONLY if entry.get(key) is not None])
    record = policy.current_record(session)
    name = entry.get("name")
    if isinstance(name, str) and record.policy.queue(name) is not None:
        raise Conflict(f"queue {name} already exists")
    queues = list(record.document.get("queues", [DEFAULT_QUEUE_ENTRY]))
    document = {**record.document, "queues": [*queues, entry]}
    _apply(session, principal, record.policy, document, len(queues), f"create queue {name}", at)
    queue = session.get(Queue, name)
    assert queue is not None
    return queue


def change_queue(
    session: Session, principal: Principal, name: str, changes: dict[str, Any], at: float
) -> Queue:
    """``PATCH /queues/{name}``: set the keys of ``changes`` in the queue's entry (a None value
    removes the key), a new policy version; an admin, or its tenant's tenant-admin within the
    limits (see the module's docstring)."""
    queue = own_queue(session, principal, name, "changing queues")
    unknown = sorted(set(changes) - set(CHANGEABLE))
    if unknown:
        raise invalid(unknown[0], f"not a setting changed here; expected {', '.join(CHANGEABLE)}")
    if not changes:
        raise invalid("", f"nothing to change: give one of {', '.join(CHANGEABLE)}")
    record = policy.current_record(session)
    queues = list(record.document.get("queues", []))
    index = next(
        (i for i, q in enumerate(queues) if isinstance(q, dict) and q.get("name") == queue.name),
        None,
    )
    if index is None:  # the built-in default queue, not written in the document
        raise Conflict(f"queue {name} is not written in the policy; an admin can add it there")
    current: dict[str, Any] = queues[index]
    entry = {k: v for k, v in current.items() if k not in changes}
    entry.update({k: v for k, v in changes.items() if v is not None})
    if not principal.is_admin:
        _admins_only(principal, [k for k in ADMINS_ONLY if entry.get(k) != current.get(k)])
    queues[index] = entry
    document = {**record.document, "queues": queues}
    what = f"queue {name} " + ", ".join(sorted(changes))
    _apply(session, principal, record.policy, document, index, what, at)
    refreshed = session.get(Queue, name)
    assert refreshed is not None
    return refreshed


def _admins_only(principal: Principal, keys: list[str]) -> None:
    if keys:
        problems = [
            FieldProblem(key, "reaches other tenants' queues: only an admin sets it")
            for key in keys
        ]
        raise Forbidden(
            f"setting {', '.join(keys)} needs an admin token; this token is {principal.describe()}",
            problems,
        )


def _apply(
    session: Session,
    principal: Principal,
    before: ClusterPolicy,
    document: dict[str, Any],
    index: int,
    action: str,
    at: float,
) -> None:
    """Validate ``document`` (problems relative to its queue ``index``), hold a tenant-admin
    to their tenant's ceiling, and apply it."""
    prefix = f"queues[{index}]"
    try:
        after = policy.validate_document(document)
    except InvalidInput as exc:
        raise InvalidInput(policy.relative_problems(exc.problems, prefix)) from None
    if not principal.is_admin:
        decl = after.queues[index]
        ceiling = _within_limits(principal, before, after, decl)
        document = _ceiling_written(document, before, after, decl.tenant, ceiling)
    try:
        policy.apply_policy(session, document, actor=f"{principal.member} ({action})", at=at)
    except InvalidInput as exc:
        raise InvalidInput(policy.relative_problems(exc.problems, prefix)) from None


def _within_limits(
    principal: Principal, before: ClusterPolicy, after: ClusterPolicy, decl: QueueDecl
) -> Ceiling:
    """The tenant's ceiling; Forbidden, naming each field, where the queue ``decl`` would take
    its tenant past it (or lose its quota: no limit at all)."""
    tenant = decl.tenant
    ceiling = ceiling_of(before, tenant)
    was = before.queue(decl.name)
    problems: list[FieldProblem] = []
    if decl.quota is None and (was is None or was.quota is not None):
        problems.append(
            FieldProblem(
                "quota",
                "a queue without quota has no limit at all; a tenant-admin's queue needs a "
                "quota within the tenant's ceiling",
            )
        )
    quota_source = (
        "set by admins in tenantLimits"
        if ceiling.quota_declared
        else "what admins gave its queues; tenantLimits in the policy may raise it"
    )
    totals_before = tenant_totals(before.queues, tenant)
    totals_after = tenant_totals(after.queues, tenant)
    for excess in excesses(totals_before, totals_after, ceiling.quota):
        problems.append(
            FieldProblem(
                quota_field(decl.quota, excess),
                f"tenant {tenant}'s queues would hold {excess.total} {excess.flavor} "
                f"{excess.resource} in all (now {excess.before}), above its ceiling of "
                f"{excess.ceiling} ({quota_source})",
            )
        )
    weight = decl.fair_share_weight
    if weight > ceiling.fair_share_weight and (was is None or weight > was.fair_share_weight):
        weight_source = (
            "set by admins in tenantLimits"
            if ceiling.weight_declared
            else "the highest admins gave its queues; tenantLimits in the policy may raise it"
        )
        problems.append(
            FieldProblem(
                "fairShareWeight",
                f"{weight:g} is above the highest weight tenant {tenant}'s queues may have, "
                f"{ceiling.fair_share_weight:g} ({weight_source})",
            )
        )
    if problems:
        raise Forbidden(
            "beyond the limits admins set for tenant "
            f"{tenant}: " + "; ".join(str(p) for p in problems) + f"; this token is "
            f"{principal.describe()}",
            problems,
        )
    return ceiling


def _ceiling_written(
    document: dict[str, Any],
    before: ClusterPolicy,
    after: ClusterPolicy,
    tenant: str,
    ceiling: Ceiling,
) -> dict[str, Any]:
    """``document`` with the parts of the tenant's ceiling that the change moves and that
    ``tenantLimits`` does not declare written there, so that they are not lost
    (``kiban.domain.tenant_limits``)."""
    quota_moved = tenant_totals(before.queues, tenant) != tenant_totals(after.queues, tenant)
    weights_moved = _weights(before, tenant) != _weights(after, tenant)
    parts = undeclared_parts(ceiling, before, quota_moved, weights_moved)
    if not parts:
        return document
    limits = [dict(entry) for entry in document.get("tenantLimits", [])]
    mine = next((entry for entry in limits if entry.get("tenant") == tenant), None)
    if mine is None:
        limits.append({"tenant": tenant, **parts})
    else:
        mine.update(parts)
    return {**document, "tenantLimits": limits}


def _weights(policy: ClusterPolicy, tenant: str) -> list[tuple[str, float]]:
    return sorted((q.name, q.fair_share_weight) for q in policy.queues if q.tenant == tenant)
