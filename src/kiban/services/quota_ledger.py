"""Who lends, who borrows, and what is over quota: the queues' GPUs of a flavor, accounted.

The numbers come from the model the scheduler decides with (``kiban.scheduler.quota``,
Kueue's): of its nominal quota of a flavor a queue keeps ``nominal - lendingLimit`` to itself
and puts the rest into its cohort's shared pool; use beyond its nominal draws on the pool.

A queue's use beyond its nominal quota (``QuotaBook.borrowed``) is, per flavor, one of two:

- **borrowed**: covered by the idle shared quota of other queues of its cohort, within its
  ``borrowingLimit``;
- **over quota**: covered by nobody. Only a policy changed under running jobs makes it (a quota
  or borrowing limit lowered, a lender's quota cut, a queue taken out of its cohort): use beyond
  the borrowing limit; outside any cohort, all of it; in a cohort, whatever of its members'
  borrowing their lenders' idle shared quota does not cover, split among the borrowers in
  proportion to what they borrow. It is given back as the jobs holding it end, or taken back by
  preemption when a queue of the cohort needs its own quota; meanwhile the queue starts no new
  work of that flavor.

**lent** is the borrowed GPUs of a cohort split among its lenders in proportion to their idle
shared quota (``shared - draw``): the pool is shared, so a borrower's GPUs come from no lender
in particular. Splits are in whole GPUs by largest remainder, ties by queue name, so per cohort
and flavor what is lent equals what is borrowed, always: nothing is borrowed from no one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.declarations import extended_per_flavor, gpus_per_flavor
from kiban.domain.quantity import parse_duration
from kiban.domain.states import JobState
from kiban.scheduler.quota import QuotaBook
from kiban.scheduler.snapshot import QueueStrategy, QueueView
from kiban.store.models import Job, Queue, Replica
from kiban.store.models_nodes import Node

HOLDING = tuple(s.value for s in JobState if s.holds_resources)


@dataclass(frozen=True, slots=True)
class Share:
    """One queue's place in the book of one flavor, in GPUs."""

    borrowed: int = 0
    lent: int = 0
    over_quota: int = 0


NOTHING = Share()


def split(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``total`` split in proportion to ``weights`` in whole numbers: floors, then one more to
    the largest remainders (ties by name). Names with no weight get nothing; the parts add up
    to ``total`` when any weight is positive."""
    pool = sum(w for w in weights.values() if w > 0)
    if total <= 0 or pool <= 0:
        return {}
    parts = {name: total * w // pool for name, w in weights.items() if w > 0}
    remainders = {name: total * weights[name] % pool for name in parts}
    left = total - sum(parts.values())
    for name in sorted(parts, key=lambda name: (-remainders[name], name))[:left]:
        parts[name] += 1
    return {name: amount for name, amount in parts.items() if amount}


def ledger(book: QuotaBook, flavor: str) -> dict[str, Share]:
    """Every queue's borrowed, lent and over-quota GPUs of ``flavor`` (queues with none of
    them are left out)."""
    over: dict[str, int] = {}
    wants: dict[str, dict[str, int]] = {}  # cohort -> queue -> borrowing within its limit
    members: dict[str, list[str]] = {}
    for name, queue in sorted(book.queues.items()):
        if queue.cohort is not None:
            members.setdefault(queue.cohort, []).append(name)
        excess = book.borrowed(name, flavor)
        if not excess:
            continue
        if queue.cohort is None:
            over[name] = excess
            continue
        limit = queue.borrowing_limit.get(flavor)
        beyond = 0 if limit is None else max(excess - limit, 0)
        if beyond:
            over[name] = beyond
        wants.setdefault(queue.cohort, {})[name] = excess - beyond
    borrowed: dict[str, int] = {}
    lent: dict[str, int] = {}
    for cohort, names in members.items():
        asked = wants.get(cohort, {})
        idle = {name: max(book.shared(name, flavor) - book.draw(name, flavor), 0) for name in names}
        covered = min(sum(asked.values()), sum(idle.values()))
        uncovered = split(sum(asked.values()) - covered, asked)
        for name, amount in asked.items():
            borrowed[name] = amount - uncovered.get(name, 0)
            over[name] = over.get(name, 0) + uncovered.get(name, 0)
        lent |= split(covered, idle)
    return {
        name: Share(borrowed.get(name, 0), lent.get(name, 0), over.get(name, 0))
        for name in sorted(set(over) | set(borrowed) | set(lent))
        if over.get(name) or borrowed.get(name) or lent.get(name)
    }


# -- reading the book from the store ------------------------------------------------------------
def queue_view(
    q: Queue,
    policy: ClusterPolicy,
    used: Mapping[str, int] | None = None,
    extended_used: Mapping[str, Mapping[str, int]] | None = None,
    now: float | None = None,
) -> QueueView:
    """The queue as the scheduler sees it; its cohort is the one whose pool it shares (the
    root of a nested cohort's tree). ``extended_used``: extended resources its jobs hold, per
    flavor. Given ``now``, a time-bounded allocation holding then (``allocation: {until}``)
    replaces its quota and weight; once it has run out, the queue's own apply again."""
    nominal, extended, weight = q.nominal, q.extended_nominal, q.fair_share_weight
    allocation = None if now is None else policy.allocation_at(q.name, now)
    if allocation is not None:
        if allocation.quota is not None:
            nominal = gpus_per_flavor(allocation.quota)
            extended = extended_per_flavor(allocation.quota)
        weight = allocation.fair_share_weight or weight
    return QueueView(
        name=q.name,
        tenant=q.tenant,
        nominal=nominal,
        used=dict(used or {}),
        strategy=QueueStrategy(q.strategy),
        cohort=None if q.cohort is None else policy.sharing_cohort(q.cohort),
        borrowing_limit=q.borrowing,
        lending_limit=q.lending,
        weight=weight,
        extended_nominal=extended,
        extended_used=dict(extended_used or {}),
        scavenger=policy.is_scavenger(q.name),
    )


def used_per_flavor(session: Session, policy: ClusterPolicy) -> dict[str, dict[str, int]]:
    """GPUs held per queue and flavor, counted as the scheduler's snapshot counts them: active
    replicas of admitted, running and stopping jobs, on nodes that match a flavor."""
    flavor_of = {
        name: policy.flavor_of(labels or {})
        for name, labels in session.execute(select(Node.name, Node.labels)).all()
    }
    per_flavor: dict[str, dict[str, int]] = {}
    for queue, node, gpu_ids in session.execute(
        select(Job.queue, Replica.node, Replica.gpu_ids)
        .join(Replica, Replica.job_id == Job.id)
        .where(Replica.active.is_(True), Job.state.in_(HOLDING))
    ).all():
        flavor = flavor_of.get(node)
        if flavor is not None and gpu_ids:
            mine = per_flavor.setdefault(queue, {})
            mine[flavor] = mine.get(flavor, 0) + len(gpu_ids)
    return per_flavor


def quota_book(session: Session, policy: ClusterPolicy) -> QuotaBook:
    """Every queue of the store with what it holds now, as the scheduler's book of quotas."""
    used = used_per_flavor(session, policy)
    return QuotaBook(
        queue_view(q, policy, used.get(q.name)) for q in session.scalars(select(Queue))
    )


def freed_by(
    session: Session, policy: ClusterPolicy, queue: str, flavor: str, gpus: int
) -> float | None:
    """When the queue's running jobs have given back ``gpus`` GPUs of ``flavor`` at the latest,
    by their ``maxRuntime``s (each ends by its start plus its maxRuntime); None when that needs
    a job that has no maxRuntime."""
    flavor_of = {
        name: policy.flavor_of(labels or {})
        for name, labels in session.execute(select(Node.name, Node.labels)).all()
    }
    held: dict[str, int] = {}
    ends: dict[str, float | None] = {}
    for job_id, started, admitted, spec, node, gpu_ids in session.execute(
        select(Job.id, Job.started_at, Job.admitted_at, Job.spec, Replica.node, Replica.gpu_ids)
        .join(Replica, Replica.job_id == Job.id)
        .where(Replica.active.is_(True), Job.queue == queue, Job.state.in_(HOLDING))
    ).all():
        if flavor_of.get(node) != flavor or not gpu_ids:
            continue
        held[job_id] = held.get(job_id, 0) + len(gpu_ids)
        if job_id not in ends:
            ends[job_id] = _end(spec, started if started is not None else admitted)
    freed = 0
    for job_id in sorted(held, key=lambda j: (ends[j] is None, ends[j] or 0.0, j)):
        end = ends[job_id]
        if end is None:
            return None
        freed += held[job_id]
        if freed >= gpus:
            return end
    return None


def _end(document: object, started: float | None) -> float | None:
    """When a job started at ``started`` ends at the latest (None: it has no maxRuntime)."""
    spec = document.get("spec") if isinstance(document, dict) else None
    raw = spec.get("maxRuntime") if isinstance(spec, dict) else None
    if raw is None or started is None:
        return None
    try:
        return started + parse_duration(raw)
    except ValueError:
        return None
