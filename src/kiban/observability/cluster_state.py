"""What ``/metrics`` reports, read from the store in one read transaction per scrape.

Every figure comes from the same snapshot (on PostgreSQL the transaction is REPEATABLE READ;
SQLite's read transactions are snapshots already), so a scrape never shows a job counted both
pending and admitted. Totals (admitted, preempted, finished, remediation actions) are counted
from rows the store keeps anyway (job events, jobs in final states, remediation actions) rather
than from counters in the process: they survive a restart of the control plane and count what
every code path did, with no call to forget. Queries read columns, never whole rows, so 16,384
nodes with their conditions cost one pass over two tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.event_reasons import JobEventReason
from kiban.domain.states import TERMINAL, JobState
from kiban.scheduler.quota import QuotaBook
from kiban.scheduler.reasons import ReasonCode
from kiban.scheduler.snapshot import DEFAULT_FLAVOR
from kiban.services.quota_ledger import HOLDING, NOTHING, Share, ledger, queue_view
from kiban.services.usage import standings
from kiban.store.models import Event, Job, Queue, Replica
from kiban.store.models_nodes import Node, RemediationAction

CHUNK = 500  # names per IN (...) of a query

HOUR, DAY = 3600.0, 86400.0
WAIT_BUCKETS: tuple[float, ...] = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0)
WAIT_BUCKETS += (HOUR, 3 * HOUR, 12 * HOUR, DAY, 3 * DAY, 7 * DAY)
"""Admission waits from a second to a week (Kueue's buckets stop at hours; GPU queues don't)."""

ADMITTED = "Admitted"  # the launcher's event on a job placed by the scheduler
STOPPED_FOR = (JobEventReason.PREEMPTED.value, JobEventReason.NODE_UNHEALTHY.value)
"""Events that stop a running job and send it back to its queue: the preemptions' reasons."""
ACTING = ("cordon", "drain", "taint", "hook")
"""Remediation actions the circuit breaker bounds (``none`` and ``uncordon`` it does not)."""
SUPPRESSED = "suppressed"
REMEDIATION = "remediation"


@dataclass(frozen=True, slots=True)
class WaitHistogram:
    """Admission waits of one queue: how many waited at most each of ``WAIT_BUCKETS``
    (cumulative, as Prometheus's buckets are), all of them, and their sum in seconds."""

    buckets: tuple[int, ...]
    count: int
    total: float


@dataclass(frozen=True, slots=True)
class QuotaRow:
    """A queue's GPUs of one flavor: nominal quota (None: no quota), used, borrowed, lent."""

    queue: str
    flavor: str
    nominal: int | None
    used: int
    borrowed: int
    lent: int


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node's figures (``report_age_s`` None: no agent has reported for it)."""

    name: str
    gpus: int
    allocated: int
    schedulable: bool
    report_age_s: float | None


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Everything ``/metrics`` reads from the store, as of ``now``."""

    now: float
    pending: dict[tuple[str, str], int]  # (queue, reason) -> jobs
    past_forecast: dict[str, int]  # queue -> pending jobs whose forecast start has passed
    horizon_s: float  # how far ahead the latest forecast reaches (0: no estimate)
    waits: dict[str, WaitHistogram]
    admitted: dict[str, int]
    preempted: dict[tuple[str, str], int]  # (queue, reason)
    finished: dict[tuple[str, str], int]  # (queue, state)
    quotas: tuple[QuotaRow, ...]
    tenants: dict[str, tuple[float, float]]  # tenant -> (decayed usage, fair share standing)
    nodes: tuple[NodeRow, ...]
    conditions: list[tuple[str, ...]]  # (node, type, status)
    remediation: dict[tuple[str, str, str], int]  # (action, check, outcome)
    breaker_open: bool
    cordoned_by_remediation: int
    idle_while_waiting: int


def read_state(session: Session, policy: ClusterPolicy, now: float) -> ClusterState:
    """One consistent read of everything ``/metrics`` reports (``session`` not used before)."""
    if session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    pending = _pending(session)
    held = _held(session)
    nodes = _nodes(session, held, now)
    waiting = sum(pending.values()) > 0
    idle = sum(free for _, free in nodes.values()) if waiting else 0
    admitted, preempted, waits = _admissions(session)
    remediation, breaker_open, cordoned = _remediation(session)
    return ClusterState(
        now=now,
        pending=pending,
        past_forecast=_past_forecast(session, now),
        horizon_s=_horizon(session, now),
        waits=waits,
        admitted=admitted,
        preempted=preempted,
        finished=_finished(session),
        quotas=_quotas(session, policy, held),
        tenants=_tenants(session, policy, now),
        nodes=tuple(row for row, _ in nodes.values()),
        conditions=_conditions(session),
        remediation=remediation,
        breaker_open=breaker_open,
        cordoned_by_remediation=cordoned,
        idle_while_waiting=idle,
    )


PENDING = Job.state == JobState.PENDING.value


def _conditions(session: Session) -> list[tuple[str, ...]]:
    """(node, type, status) of every condition: the largest read of a scrape (nine rows per
    node)."""
    return _raw(session, "SELECT node, type, status FROM node_conditions")


def _raw(session: Session, sql: str) -> list[tuple[Any, ...]]:
    """The rows of a constant query, as the driver's plain tuples: the two reads that grow
    with the nodes (16,384 and nine times that) skip SQLAlchemy's per-row processing."""
    cursor = session.connection().connection.cursor()
    try:
        cursor.execute(sql)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _pending(session: Session) -> dict[tuple[str, str], int]:
    """Pending jobs per queue and reason; those no pass has judged yet (behind their queue's
    window) under ``QueueBacklog``, the reason the loop gives them."""
    counts: dict[tuple[str, str], int] = {}
    query = select(Job.queue, Job.reason_code, func.count()).where(PENDING)
    for queue, reason, count in session.connection().execute(
        query.group_by(Job.queue, Job.reason_code)
    ):
        key = (queue, reason or ReasonCode.QUEUE_BACKLOG.value)
        counts[key] = counts.get(key, 0) + count
    return counts


def _past_forecast(session: Session, now: float) -> dict[str, int]:
    query = select(Job.queue, func.count()).where(PENDING, Job.eta.is_not(None), Job.eta < now)
    return {
        queue: count for queue, count in session.connection().execute(query.group_by(Job.queue))
    }


def _horizon(session: Session, now: float) -> float:
    latest = session.connection().scalar(select(func.max(Job.eta)).where(PENDING))
    return max(float(latest) - now, 0.0) if latest is not None else 0.0


def _admissions(
    session: Session,
) -> tuple[dict[str, int], dict[tuple[str, str], int], dict[str, WaitHistogram]]:
    """Admissions and preemptions per queue, counted from the jobs' events by the store; each
    admission's wait is its time from submission (kept across requeues, so a preempted job's
    wait counts from its first submission, as its place in line does)."""
    connection = session.connection()
    events = Event.object_kind == "Job"
    wait = Event.at - Job.submitted_at
    admitted: dict[str, int] = {}
    waits: dict[str, WaitHistogram] = {}
    query = (
        select(
            Job.queue,
            func.count(),
            func.sum(wait),
            *(func.sum(case((wait <= bound, 1), else_=0)) for bound in WAIT_BUCKETS),
        )
        .join(Job, Job.id == Event.object_name)
        .where(events, Event.reason == ADMITTED)
        .group_by(Job.queue)
    )
    for queue, count, total, *buckets in connection.execute(query).all():
        admitted[queue] = int(count)
        waits[queue] = WaitHistogram(tuple(int(b) for b in buckets), int(count), float(total))
    stops = (
        select(Job.queue, Event.reason, func.count())
        .join(Job, Job.id == Event.object_name)
        .where(events, Event.reason.in_(STOPPED_FOR))
        .group_by(Job.queue, Event.reason)
    )
    preempted = {(queue, reason): int(n) for queue, reason, n in connection.execute(stops).all()}
    return admitted, preempted, waits


def _finished(session: Session) -> dict[tuple[str, str], int]:
    finals = [state.value for state in TERMINAL]
    query = select(Job.queue, Job.state, func.count()).where(Job.state.in_(finals))
    return {
        (queue, state): count
        for queue, state, count in session.connection().execute(
            query.group_by(Job.queue, Job.state)
        )
    }


@dataclass(frozen=True, slots=True)
class Held:
    """One active replica: its job's queue and whether the job holds quota, its node, GPUs."""

    queue: str
    holding: bool
    node: str
    gpus: int


def _held(session: Session) -> list[Held]:
    query = (
        select(Job.queue, Job.state, Replica.node, Replica.gpu_ids)
        .join(Job, Job.id == Replica.job_id)
        .where(Replica.active.is_(True))
    )
    return [
        Held(queue, state in HOLDING, node, len(gpu_ids or ()))
        for queue, state, node, gpu_ids in session.connection().execute(query)
    ]


def _quotas(session: Session, policy: ClusterPolicy, held: list[Held]) -> tuple[QuotaRow, ...]:
    """Each queue's nominal, used, borrowed and lent GPUs per flavor, as ``GET /queues``
    accounts them (``kiban.services.quota_ledger``), reading the labels of only the nodes
    that hold work (the queue status reads every node's)."""
    busy = sorted({h.node for h in held if h.holding and h.gpus})
    flavor_of: dict[str, str | None] = {}
    if policy.flavors:
        for first in range(0, len(busy), CHUNK):
            query = select(Node.name, Node.labels).where(Node.name.in_(busy[first : first + CHUNK]))
            for name, labels in session.connection().execute(query):
                flavor_of[name] = policy.flavor_of(labels or {})
    used: dict[str, dict[str, int]] = {}
    for h in held:
        flavor = flavor_of.get(h.node) if policy.flavors else DEFAULT_FLAVOR
        if h.holding and h.gpus and flavor is not None:
            mine = used.setdefault(h.queue, {})
            mine[flavor] = mine.get(flavor, 0) + h.gpus
    queues = list(session.scalars(select(Queue).order_by(Queue.name)))
    book = QuotaBook(queue_view(q, policy, used.get(q.name)) for q in queues)
    books: dict[str, dict[str, Share]] = {}
    rows = []
    for q in queues:
        nominal = q.nominal
        names = list(nominal or ())
        names += sorted(set(used.get(q.name, {})) - set(names))
        for flavor in names:
            if flavor not in books:
                books[flavor] = ledger(book, flavor)
            share = books[flavor].get(q.name, NOTHING)
            rows.append(
                QuotaRow(
                    q.name,
                    flavor,
                    None if nominal is None else nominal.get(flavor, 0),
                    book.used(q.name, flavor),
                    share.borrowed,
                    share.lent,
                )
            )
    return tuple(rows)


def _tenants(session: Session, policy: ClusterPolicy, now: float) -> dict[str, tuple[float, float]]:
    """Each tenant's decayed usage, and its fair-share standing: its part of all usage over its
    part of all weight (1: exactly its share; under 1: under its share; 0 when nobody used
    anything). The weight is its queues' largest, as the scheduler takes it."""
    views = [queue_view(q, policy) for q in session.scalars(select(Queue))]
    weights: dict[str, float] = {}
    for view in views:
        weights[view.tenant] = max(weights.get(view.tenant, 0.0), view.weight)
    per_weight = standings(session, now, policy, views)
    usage = {tenant: value * weights.get(tenant, 1.0) for tenant, value in per_weight.items()}
    for tenant in weights:
        usage.setdefault(tenant, 0.0)
    all_usage = sum(usage.values())
    all_weight = sum(weights.get(t, 1.0) for t in usage)
    result = {}
    for tenant, used in usage.items():
        weight = weights.get(tenant, 1.0)
        share = weight / all_weight if all_weight > 0 else 0.0
        standing = (used / all_usage) / share if all_usage > 0 and share > 0 else 0.0
        result[tenant] = (used, standing)
    return result


def _nodes(session: Session, held: list[Held], now: float) -> dict[str, tuple[NodeRow, int]]:
    """Each node's row and its GPUs free for kiban's work if it is schedulable (else 0)."""
    allocated: dict[str, int] = {}
    for h in held:
        allocated[h.node] = allocated.get(h.node, 0) + h.gpus
    result: dict[str, tuple[NodeRow, int]] = {}
    rows = _raw(
        session,
        "SELECT name, gpus, healthy, cordoned, unschedulable_reason, gpus_used_elsewhere,"
        " agent_reported_at FROM nodes ORDER BY name",
    )
    for name, gpus, healthy, cordoned, why, elsewhere, reported in rows:
        used = allocated.get(name, 0)
        schedulable = bool(healthy) and not cordoned and not why
        age = None if reported is None else max(now - reported, 0.0)
        free = max(gpus - used - (elsewhere or 0), 0) if schedulable else 0
        result[name] = (NodeRow(name, gpus, used, schedulable, age), free)
    return result


def _remediation(session: Session) -> tuple[dict[tuple[str, str, str], int], bool, int]:
    """Actions per (action, check, outcome); whether the breaker is open (the newest action it
    bounds was suppressed); and the nodes remediation has cordoned."""
    query = select(
        RemediationAction.action, RemediationAction.check, RemediationAction.outcome, func.count()
    ).group_by(RemediationAction.action, RemediationAction.check, RemediationAction.outcome)
    actions = {(a, c, o): n for a, c, o, n in session.connection().execute(query)}
    newest = session.connection().scalar(
        select(RemediationAction.outcome)
        .where(RemediationAction.action.in_(ACTING))
        .order_by(RemediationAction.id.desc())
        .limit(1)
    )
    cordoned = session.connection().scalar(
        select(func.count()).select_from(Node).where(Node.cordon_source == REMEDIATION)
    )
    return actions, newest == SUPPRESSED, int(cordoned or 0)
