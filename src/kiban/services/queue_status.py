"""What each queue holds and waits for, per flavor, and its tenant's fair-share usage and standing.

The numbers come from the same model the scheduler decides with (``kiban.scheduler.quota``,
Kueue's): of its nominal quota of a flavor a queue keeps ``nominal - lendingLimit`` to itself
and puts the rest into its cohort's shared pool; use beyond its own part draws on the pool.

- **used**: GPUs of the flavor held by the queue's admitted, running and stopping jobs.
- **borrowed**, **lent** and **over quota**: see ``kiban.services.quota_ledger``. Borrowed GPUs
  are covered by the idle shared quota of other queues of the cohort, and per cohort and flavor
  what is lent equals what is borrowed; use beyond what the policy lets a queue hold now (after
  a quota was lowered under running jobs) is over quota, never "borrowed" from no one.
- **pending**: waiting jobs and the GPUs they ask for. Per flavor, only the jobs whose
  current reason names that flavor (a waiting job has no flavor until it is admitted).

A **scavenger** queue (the policy's ``scavenger: true``) runs its jobs on idle capacity only:
any job that needs their nodes preempts them, whatever its queue or priority.

Usage is the tenant's decayed weighted resource-seconds (``kiban.services.usage``); the
standing is usage per unit of fair-share weight, the number the scheduler orders tenants by.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.states import JobState
from kiban.domain.usage import decay
from kiban.scheduler.quota import QuotaBook
from kiban.services.auth import Principal
from kiban.services.jobs import manifest_demand
from kiban.services.quota_ledger import (
    HOLDING,
    NOTHING,
    Share,
    ledger,
    queue_view,
    used_per_flavor,
)
from kiban.services.usage import standings
from kiban.store.models import Job, Queue, Replica
from kiban.store.models_accounting import TenantUsage


@dataclass(frozen=True, slots=True)
class FlavorStatus:
    """One queue's quota and use of one flavor, in GPUs (limits: None when not set)."""

    flavor: str
    nominal: int | None
    borrowing_limit: int | None
    lending_limit: int | None
    used: int = 0
    borrowed: int = 0
    lent: int = 0
    pending_jobs: int = 0
    pending_gpus: int = 0
    over_quota: int = 0


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue: its flavors, its jobs, and its tenant's decayed usage and standing."""

    queue: Queue
    flavors: tuple[FlavorStatus, ...]
    gpus_in_use: int  # on any node, including one that matches no flavor
    pending_jobs: int
    pending_gpus: int
    running_jobs: int
    usage: float  # the tenant's decayed weighted resource-seconds
    standing: float  # usage per unit of fair-share weight
    scavenger: bool  # declared ``scavenger: true``: its jobs use idle capacity only

    @property
    def borrowed(self) -> int:
        return sum(f.borrowed for f in self.flavors)

    @property
    def lent(self) -> int:
        return sum(f.lent for f in self.flavors)

    @property
    def over_quota(self) -> int:
        return sum(f.over_quota for f in self.flavors)


@dataclass(frozen=True, slots=True)
class TenantShare:
    """A tenant's decayed usage (weighted resource-seconds) and its standing (usage / weight)."""

    usage: float
    standing: float


def tenant_shares(
    session: Session, policy: ClusterPolicy, now: float, queues: Iterable[Queue] | None = None
) -> dict[str, TenantShare]:
    """Every tenant's usage and standing as of ``now``; a tenant with no usage yet has zeros.

    ``queues`` (default: all) give the weights, as the scheduler takes them.
    """
    rows = list(session.scalars(select(Queue))) if queues is None else list(queues)
    views = [queue_view(q, policy) for q in rows]
    standing = standings(session, now, policy, views)
    shares = {q.tenant: TenantShare(0.0, 0.0) for q in rows}
    for row in session.scalars(select(TenantUsage)):
        usage = decay(row.usage, now - row.updated_at, policy.half_life_s)
        shares[row.tenant] = TenantShare(usage, standing.get(row.tenant, 0.0))
    return shares


def _pending(
    session: Session, queues: Iterable[str]
) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, str], tuple[int, int]]]:
    """Pending jobs and GPUs per queue, and per (queue, flavor) its current reason names.

    Counted from the index of jobs per queue and state, whatever the backlog; only the jobs a
    pass has judged (those with a reason: each queue's window) are read one by one, for the
    flavors their reasons name.
    """
    pending = Job.state == JobState.PENDING.value
    per_queue: dict[str, tuple[int, int]] = {}
    for queue in queues:
        jobs, gpus, known = session.execute(
            select(func.count(), func.sum(Job.gpus), func.count(Job.gpus)).where(
                Job.queue == queue, pending
            )
        ).one()
        total = int(gpus or 0)
        if known < jobs:  # jobs stored before their GPUs were (see migration 0011_backlog_indexes)
            query = select(Job.spec).where(Job.queue == queue, pending, Job.gpus.is_(None))
            total += sum(manifest_demand(spec).gpus for spec in session.scalars(query))
        if jobs:
            per_queue[queue] = (jobs, total)
    per_flavor: dict[tuple[str, str], tuple[int, int]] = {}
    judged = session.execute(
        select(Job.id, Job.queue, Job.gpus, Job.reason_details).where(
            pending, Job.reason_code.is_not(None)
        )
    ).all()
    missing = [job_id for job_id, _queue, gpus, _details in judged if gpus is None]
    specs: dict[str, dict[str, Any]] = {}
    if missing:
        query = select(Job.id, Job.spec).where(Job.id.in_(missing))
        specs = {job_id: spec for job_id, spec in session.execute(query).all()}
    for job_id, queue, gpus, details in judged:
        flavor = (details or {}).get("flavor")
        if isinstance(flavor, str):
            count = manifest_demand(specs[job_id]).gpus if gpus is None else gpus
            jobs, total = per_flavor.get((queue, flavor), (0, 0))
            per_flavor[(queue, flavor)] = (jobs + 1, total + count)
    return per_queue, per_flavor


def _held(session: Session) -> dict[str, tuple[int, int]]:
    """Per queue: its admitted, running and stopping jobs, and the GPUs its active replicas
    hold on any node. Read through the jobs holding resources, not every job ever stored."""
    held: dict[str, tuple[int, int]] = {}
    for queue, jobs in session.execute(
        select(Job.queue, func.count()).where(Job.state.in_(HOLDING)).group_by(Job.queue)
    ).all():
        held[queue] = (jobs, 0)
    for queue, gpu_ids in session.execute(
        select(Job.queue, Replica.gpu_ids)
        .join(Replica, Replica.job_id == Job.id)
        .where(Replica.active.is_(True))
    ).all():
        jobs, gpus = held.get(queue, (0, 0))
        held[queue] = (jobs, gpus + len(gpu_ids or []))
    return held


def queue_statuses(
    session: Session, principal: Principal, policy: ClusterPolicy, now: float
) -> list[QueueStatus]:
    """The queues the caller may see, by name, each with its per-flavor accounting.

    Lending is computed over every queue (another tenant's use of a cohort is what makes a
    queue's quota lent), but only the caller's own queues are returned.
    """
    rows = list(session.scalars(select(Queue).order_by(Queue.name)))
    used = used_per_flavor(session, policy)
    book = QuotaBook(queue_view(q, policy, used.get(q.name)) for q in rows)
    held = _held(session)
    pending, pending_by_flavor = _pending(session, [q.name for q in rows])
    books: dict[str, dict[str, Share]] = {}
    shares = tenant_shares(session, policy, now, rows)
    result = []
    for q in rows:
        if not principal.can_see(q.tenant):
            continue
        nominal = q.nominal
        names = list(nominal or ())
        extra = set(used.get(q.name, {})) | {f for (name, f) in pending_by_flavor if name == q.name}
        names += sorted(extra - set(names))
        flavors = []
        for flavor in names:
            if flavor not in books:
                books[flavor] = ledger(book, flavor)
            share = books[flavor].get(q.name, NOTHING)
            jobs, gpus = pending_by_flavor.get((q.name, flavor), (0, 0))
            flavors.append(
                FlavorStatus(
                    flavor=flavor,
                    nominal=None if nominal is None else nominal.get(flavor, 0),
                    borrowing_limit=q.borrowing.get(flavor),
                    lending_limit=q.lending.get(flavor),
                    used=book.used(q.name, flavor),
                    borrowed=share.borrowed,
                    lent=share.lent,
                    pending_jobs=jobs,
                    pending_gpus=gpus,
                    over_quota=share.over_quota,
                )
            )
        standing = shares.get(q.tenant, TenantShare(0.0, 0.0))
        jobs, gpus = pending.get(q.name, (0, 0))
        result.append(
            QueueStatus(
                queue=q,
                flavors=tuple(flavors),
                gpus_in_use=held.get(q.name, (0, 0))[1],
                pending_jobs=jobs,
                pending_gpus=gpus,
                running_jobs=held.get(q.name, (0, 0))[0],
                usage=standing.usage,
                standing=standing.standing,
                scavenger=policy.is_scavenger(q.name),
            )
        )
    return result
