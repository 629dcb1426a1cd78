"""The limits admins set on a tenant's own administration: how much quota its tenant-admins may
give its queues, and how high a fair-share weight.

A tenant's ceiling is its ``tenantLimits`` entry in the policy; where that says nothing, it is
what admins already gave the tenant: the sum of its queues' nominal quotas, per flavor and
resource, and the highest weight among them, as the policy stands. So a tenant-admin may move
quota between their own queues, or create a queue with quota taken from another, but never
raise the total. A change is refused where it would leave a total above the ceiling *and* above
what it was (a tenant that admins left above its ceiling may still shrink, or move quota, but
not grow). Admins are not held to ceilings: they set them.

What admins gave is written down the first time a tenant-admin changes the tenant's totals (or
a weight): the change also adds the ceiling in force to ``tenantLimits`` (``written_limit``),
so that quota moved in several steps (lower one queue, then raise another) is not lost on the
way. It stays there, in the policy for all to see, until an admin changes it.

Amounts are keyed ``(flavor, resource)``: ``("h100", "gpu")``, ``("h100", "nvidia.com/hostdev")``;
a policy without flavors counts under ``default``. Pure functions: the services read the policy
before and after a change and ask ``excesses``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.declarations import (
    GpuAmount,
    GpusByFlavor,
    QueueDecl,
    extended_per_flavor,
    gpus_per_flavor,
)

Amounts = dict[tuple[str, str], int]
"""Nominal amounts per ``(flavor, resource)``."""

GPU = "gpu"


def quota_amounts(quota: GpusByFlavor | None) -> Amounts:
    """A quota as amounts per (flavor, resource); None (no quota) names none."""
    amounts: Amounts = {(flavor, GPU): gpus for flavor, gpus in gpus_per_flavor(quota).items()}
    for flavor, resources in extended_per_flavor(quota).items():
        for resource, amount in resources.items():
            amounts[(flavor, resource)] = amount
    return amounts


def tenant_totals(queues: Iterable[QueueDecl], tenant: str) -> Amounts:
    """The nominal quotas of ``tenant``'s queues, summed per (flavor, resource)."""
    totals: Amounts = {}
    for queue in queues:
        if queue.tenant != tenant:
            continue
        for key, amount in quota_amounts(queue.quota).items():
            totals[key] = totals.get(key, 0) + amount
    return totals


@dataclass(frozen=True, slots=True)
class Ceiling:
    """A tenant's ceiling; ``declared``: written in ``tenantLimits`` (else what admins gave)."""

    quota: Amounts
    fair_share_weight: float
    quota_declared: bool
    weight_declared: bool


def ceiling_of(policy: ClusterPolicy, tenant: str) -> Ceiling:
    """``tenant``'s ceiling under ``policy`` (see the module's docstring)."""
    limit = policy.tenant_limit(tenant)
    declared_quota = limit is not None and limit.quota is not None
    quota = (
        quota_amounts(limit.quota)
        if limit is not None and limit.quota is not None
        else tenant_totals(policy.queues, tenant)
    )
    if limit is not None and limit.fair_share_weight is not None:
        weight, weight_declared = limit.fair_share_weight, True
    else:
        own = [q.fair_share_weight for q in policy.queues if q.tenant == tenant]
        weight, weight_declared = max(own, default=1.0), False
    return Ceiling(quota, weight, declared_quota, weight_declared)


@dataclass(frozen=True, slots=True)
class Excess:
    """One (flavor, resource) whose total a change would raise above the ceiling."""

    flavor: str
    resource: str
    ceiling: int
    total: int  # the tenant's total after the change
    before: int  # and before it


def excesses(before: Amounts, after: Amounts, ceiling: Amounts) -> list[Excess]:
    """The totals ``after`` a change that exceed the ceiling and grew, in (flavor, resource)
    order."""
    found = []
    for key in sorted(after):
        total, was, most = after[key], before.get(key, 0), ceiling.get(key, 0)
        if total > most and total > was:
            found.append(Excess(key[0], key[1], most, total, was))
    return found


def quota_field(quota: GpusByFlavor | None, excess: Excess) -> str:
    """The path of ``excess`` inside a queue entry as written: ``quota.h100.gpu``, or
    ``quota.gpu`` for a quota written without flavors."""
    if isinstance(quota, GpuAmount):
        return f"quota.{excess.resource}"
    return f"quota.{excess.flavor}.{excess.resource}"


def written_quota(amounts: Amounts, policy: ClusterPolicy) -> dict[str, Any]:
    """Amounts as a policy writes a quota: ``{h100: {gpu: 6, nvidia.com/hostdev: 2}}``, or
    ``{gpu: 6}`` in a policy without flavors."""
    per_flavor: dict[str, dict[str, int]] = {}
    for (flavor, resource), amount in sorted(amounts.items()):
        per_flavor.setdefault(flavor, {GPU: 0})[resource] = amount
    if not policy.flavors:
        return per_flavor.get(policy.flavor_names[0], {GPU: 0})
    return per_flavor


def undeclared_parts(
    ceiling: Ceiling, policy: ClusterPolicy, quota: bool, weight: bool
) -> dict[str, Any]:
    """The parts of ``ceiling`` that ``tenantLimits`` does not declare, written as it would
    (``quota``, ``weight``: the parts a change needs kept), to add to the tenant's entry."""
    parts: dict[str, Any] = {}
    if quota and not ceiling.quota_declared:
        parts["quota"] = written_quota(ceiling.quota, policy)
    if weight and not ceiling.weight_declared:
        parts["fairShareWeight"] = ceiling.fair_share_weight
    return parts
