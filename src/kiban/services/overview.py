"""The cluster at a glance, as the dashboard's overview shows it: GPUs per flavor, each queue's
quota and use, waiting jobs by reason, and the tenants' fair-share standing.

GPUs per flavor are cluster facts every caller sees (as ``GET /nodes``); queues, waiting jobs
and tenants are the caller's own (a member's tenant; an admin's, all). Every number is a GPU
count, from the same accounting as ``GET /queues`` (``kiban.services.queue_status``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.states import JobState
from kiban.scheduler.reasons import ReasonCode
from kiban.services.auth import Principal
from kiban.services.nodes import gpus_in_use, list_nodes
from kiban.services.queue_status import QueueStatus, queue_statuses, tenant_shares
from kiban.store.models import Job

NO_FLAVOR = "(none)"
"""Where nodes that match no declared flavor are counted (they serve no queue's quota)."""
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class FlavorGpus:
    """A flavor's GPUs: on its nodes (``total``), held by kiban's replicas (``used``), taken by
    queues beyond their own quota (``borrowed``), on unhealthy nodes and not in use
    (``unhealthy``), and left to place work on (``free``: healthy, not cordoned, not used by
    kiban or by work it did not start)."""

    flavor: str
    total: int
    free: int
    used: int
    borrowed: int
    unhealthy: int


@dataclass(frozen=True, slots=True)
class TenantStanding:
    """A tenant's decayed usage in weighted resource-hours (GPU-hours under the default
    weights) and its standing (usage per unit of weight: lower goes first)."""

    name: str
    standing: float
    usage_gpu_hours: float


@dataclass(frozen=True, slots=True)
class Overview:
    at: float
    flavors: tuple[FlavorGpus, ...]
    queues: tuple[QueueStatus, ...]
    pending_by_reason: tuple[tuple[str, int], ...]
    tenants: tuple[TenantStanding, ...]


def overview(session: Session, principal: Principal, policy: ClusterPolicy, now: float) -> Overview:
    """What the overview shows the caller, as of ``now``."""
    everyone = Principal(name="overview", tenant=None, is_admin=True)
    every_queue = queue_statuses(session, everyone, policy, now)
    mine = tuple(q for q in every_queue if principal.can_see(q.queue.tenant))
    return Overview(
        at=now,
        flavors=_flavors(session, policy, every_queue),
        queues=mine,
        pending_by_reason=_pending_by_reason(session, principal),
        tenants=_tenants(session, principal, policy, now),
    )


def _flavors(
    session: Session, policy: ClusterPolicy, queues: list[QueueStatus]
) -> tuple[FlavorGpus, ...]:
    used_on = gpus_in_use(session)
    counts: dict[str, list[int]] = {f.name: [0, 0, 0, 0] for f in policy.flavor_views()}
    for node in list_nodes(session):
        flavor = policy.flavor_of(node.labels) or NO_FLAVOR
        total, free, used, unhealthy = counts.setdefault(flavor, [0, 0, 0, 0])
        held = min(node.gpus, used_on.get(node.name, 0))
        idle = max(0, node.gpus - held - node.gpus_used_elsewhere)
        takes_work = node.healthy and not node.cordoned and not node.unschedulable_reason
        counts[flavor] = [
            total + node.gpus,
            free + (idle if takes_work else 0),
            used + held,
            unhealthy + (0 if node.healthy else max(0, node.gpus - held)),
        ]
    borrowed: dict[str, int] = {}
    for q in queues:
        for f in q.flavors:
            borrowed[f.flavor] = borrowed.get(f.flavor, 0) + f.borrowed
    return tuple(
        FlavorGpus(name, total, free, used, borrowed.get(name, 0), unhealthy)
        for name, (total, free, used, unhealthy) in counts.items()
    )


def _pending_by_reason(session: Session, principal: Principal) -> tuple[tuple[str, int], ...]:
    """Waiting jobs per reason code, most first; a job no pass has judged yet counts as
    ``QueueBacklog`` (the reason the API gives it, ``reasons.awaiting_pass``)."""
    query = (
        select(Job.reason_code, func.count())
        .where(Job.state == JobState.PENDING.value)
        .group_by(Job.reason_code)
    )
    if not principal.is_admin:
        query = query.where(Job.tenant == principal.tenant)
    counts: dict[str, int] = {}
    for code, count in session.execute(query).all():
        key = code or ReasonCode.QUEUE_BACKLOG.value
        counts[key] = counts.get(key, 0) + int(count)
    return tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _tenants(
    session: Session, principal: Principal, policy: ClusterPolicy, now: float
) -> tuple[TenantStanding, ...]:
    shares = tenant_shares(session, policy, now)
    return tuple(
        TenantStanding(tenant, share.standing, share.usage / SECONDS_PER_HOUR)
        for tenant, share in sorted(shares.items())
        if principal.can_see(tenant)
    )
