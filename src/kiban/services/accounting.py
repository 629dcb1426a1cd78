"""Usage accounting in the store: a record opened when an attempt starts, closed once when it
is settled, and the queries that report usage from those records (``kiban usage``).

Records are undecayed (``kiban.domain.accounting``); fair share's decayed usage lives in
``kiban.services.usage``.
"""

from __future__ import annotations

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from kiban.store.models import UsageRecord


def gpu_seconds_used(
    session: Session,
    *,
    tenant: str,
    since: float,
    until: float,
    now: float,
    queue: str | None = None,
) -> float:
    """GPU-seconds a tenant (or one of its queues) held within ``[since, until)``.

    Closed records count the part of ``[started_at, ended_at)`` inside the window; records still
    open count up to ``min(now, until)``. This is what budgets are held against.
    """
    end = func.coalesce(UsageRecord.ended_at, now)
    conditions = [
        UsageRecord.tenant == tenant,
        UsageRecord.started_at < until,
        or_(UsageRecord.ended_at.is_(None), UsageRecord.ended_at > since),
    ]
    if queue is not None:
        conditions.append(UsageRecord.queue == queue)
    rows = session.execute(
        select(UsageRecord.gpus, UsageRecord.started_at, end).where(
            and_(*conditions), UsageRecord.gpus > 0
        )
    )
    total = 0.0
    for gpus, started, ended in rows:
        held = min(float(ended), until) - max(float(started), since)
        if held > 0:
            total += gpus * held
    return total
