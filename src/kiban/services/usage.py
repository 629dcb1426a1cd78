"""Tenants' fair-share usage in the store: accrued each pass, read as standings."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.usage import accrue, decay, standing, weighted_rate
from kiban.scheduler.snapshot import QueueView, RunningJob
from kiban.store.models_accounting import TenantUsage


def accrue_usage(
    session: Session, running: Iterable[RunningJob], now: float, policy: ClusterPolicy
) -> None:
    """Add what each tenant held since its last update to its decayed usage (not committed).

    A tenant seen holding resources for the first time starts at zero from ``now``.
    """
    held: dict[str, dict[str, float]] = {}
    for job in running:
        mine = held.setdefault(job.tenant, {"gpu": 0.0, "cpu": 0.0, "memory": 0.0})
        for r in job.replicas:
            mine["gpu"] += len(r.gpu_ids)
            mine["cpu"] += r.cpu_millis / 1000
            mine["memory"] += r.memory / 2**30
    weights = policy.fair_share.resource_weights.model_dump()
    rows = {row.tenant: row for row in session.scalars(select(TenantUsage))}
    for tenant in sorted(set(rows) | set(held)):
        row = rows.get(tenant)
        if row is None:
            session.add(TenantUsage(tenant=tenant, usage=0.0, updated_at=now))
            continue
        rate = weighted_rate(held.get(tenant, {}), weights)
        row.usage = accrue(row.usage, rate, now - row.updated_at, policy.half_life_s)
        row.updated_at = now


def standings(
    session: Session, now: float, policy: ClusterPolicy, queues: Iterable[QueueView]
) -> dict[str, float]:
    """Each tenant's decayed usage as of ``now`` per its weight (its queues' largest)."""
    weights: dict[str, float] = {}
    for q in queues:
        weights[q.tenant] = max(weights.get(q.tenant, 0.0), q.weight)
    result = {}
    for row in session.scalars(select(TenantUsage)):
        usage = decay(row.usage, now - row.updated_at, policy.half_life_s)
        result[row.tenant] = standing(usage, weights.get(row.tenant, 1.0))
    return result
