"""Members' fair-share usage within their tenant (Fair Tree's second level), kept in the store.

The control loop accrues it each pass beside the tenants' (``kiban.services.usage``), from
the same running jobs and with the same resource weights and half-life, so a tenant's usage
is the sum of its members'. A job's member is who submitted it (``Job.submitted_by``); a job
without one counts for the tenant's anonymous member, ``""``. ``shares`` is what
``kiban share`` shows, as Slurm's ``sshare`` does per account and user.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.usage import accrue, decay, standing, weighted_rate
from kiban.scheduler.fair_tree import MemberKey, member_key
from kiban.scheduler.snapshot import RunningJob
from kiban.services.auth import Principal
from kiban.store.models_accounting import MemberUsage


def accrue_member_usage(
    session: Session, running: Iterable[RunningJob], now: float, policy: ClusterPolicy
) -> None:
    """Add what each member held since its last update to its usage (not committed).

    A member seen holding resources for the first time starts at zero from ``now``, as a
    tenant does; ``raw_usage`` adds the same weighted resource-seconds, undecayed.
    """
    held: dict[MemberKey, dict[str, float]] = {}
    for job in running:
        mine = held.setdefault(
            member_key(job.tenant, job.member), {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
        )
        for r in job.replicas:
            mine["gpu"] += len(r.gpu_ids)
            mine["cpu"] += r.cpu_millis / 1000
            mine["memory"] += r.memory / 2**30
    weights = policy.fair_share.resource_weights.model_dump()
    rows = {(row.tenant, row.member): row for row in session.scalars(select(MemberUsage))}
    for key in sorted(set(rows) | set(held)):
        row = rows.get(key)
        if row is None:
            tenant, member = key
            session.add(
                MemberUsage(tenant=tenant, member=member, usage=0.0, raw_usage=0.0, updated_at=now)
            )
            continue
        dt = now - row.updated_at
        if dt <= 0:
            continue
        rate = weighted_rate(held.get(key, {}), weights)
        row.usage = accrue(row.usage, rate, dt, policy.half_life_s)
        row.raw_usage += rate * dt
        row.updated_at = now


def member_standings(
    session: Session, now: float, policy: ClusterPolicy
) -> tuple[dict[MemberKey, float], dict[MemberKey, float]]:
    """Each member's decayed usage as of ``now`` per its weight, and the weights the policy
    gives (members it does not list weigh 1): the snapshot's second level."""
    weights = policy.fair_share.member_weights()
    result: dict[MemberKey, float] = {}
    for row in session.scalars(select(MemberUsage)):
        usage = decay(row.usage, now - row.updated_at, policy.half_life_s)
        key = (row.tenant, row.member)
        result[key] = standing(usage, weights.get(key, 1.0))
    return result, weights


@dataclass(frozen=True, slots=True)
class MemberShare:
    """One member as ``kiban share`` shows it.

    ``usage`` is its decayed usage (weighted resource-seconds), ``raw_usage`` the undecayed
    total since it was first seen; ``share`` its weight's part of its tenant's listed weights
    (sshare's normalized shares), ``effective`` its part of its tenant's decayed usage
    (sshare's effective usage); ``standing`` usage per weight, the number members of one
    tenant are ordered by, lowest first; ``rank`` its place in that order (1: goes first).
    """

    tenant: str
    member: str
    weight: float
    raw_usage: float
    usage: float
    share: float
    effective: float
    standing: float
    rank: int


def shares(
    session: Session, now: float, policy: ClusterPolicy, tenants: Collection[str] | None
) -> list[MemberShare]:
    """The members of ``tenants`` (None: every tenant) with usage or a weight in the policy,
    by tenant, then standing (lowest first), then name."""
    weights = policy.fair_share.member_weights()
    found: dict[MemberKey, tuple[float, float]] = {}
    query = select(MemberUsage)
    if tenants is not None:
        query = query.where(MemberUsage.tenant.in_(sorted(tenants)))
    for row in session.scalars(query):
        usage = decay(row.usage, now - row.updated_at, policy.half_life_s)
        found[(row.tenant, row.member)] = (row.raw_usage, usage)
    for key in weights:
        if tenants is None or key[0] in tenants:
            found.setdefault(key, (0.0, 0.0))
    by_tenant: dict[str, list[tuple[str, float, float, float]]] = {}
    for (tenant, member), (raw, usage) in found.items():
        by_tenant.setdefault(tenant, []).append(
            (member, weights.get((tenant, member), 1.0), raw, usage)
        )
    result: list[MemberShare] = []
    for tenant in sorted(by_tenant):
        members = by_tenant[tenant]
        total_weight = sum(w for _m, w, _r, _u in members)
        total_usage = sum(u for _m, _w, _r, u in members)
        ranked = sorted(members, key=lambda m: (standing(m[3], m[1]), m[0]))
        for rank, (member, weight, raw, usage) in enumerate(ranked, start=1):
            result.append(
                MemberShare(
                    tenant=tenant,
                    member=member,
                    weight=weight,
                    raw_usage=raw,
                    usage=usage,
                    share=weight / total_weight if total_weight > 0 else 0.0,
                    effective=usage / total_usage if total_usage > 0 else 0.0,
                    standing=standing(usage, weight),
                    rank=rank,
                )
            )
    return result


def visible_shares(
    session: Session, principal: Principal, policy: ClusterPolicy, now: float, tenant: str | None
) -> list[MemberShare]:
    """The members ``principal`` may see: an admin every tenant's, others their own tenant's;
    ``tenant`` narrows it to one (another tenant's name shows nothing, as for jobs)."""
    if principal.is_admin:
        tenants: Collection[str] | None = None if tenant is None else {tenant}
    else:
        mine = principal.tenant
        tenants = {mine} if mine is not None and tenant in (None, mine) else set()
    if tenants is not None and not tenants:
        return []
    return shares(session, now, policy, tenants)
