"""What the dashboard's own reads answer: the overview and the usage history (camelCase)."""

from __future__ import annotations

from kiban.api.schemas import ApiModel
from kiban.services.overview import Overview
from kiban.services.usage_history import TenantHistory


class FlavorGpusOut(ApiModel):
    """A flavor's GPUs (see ``kiban.services.overview.FlavorGpus``)."""

    flavor: str
    total: int
    free: int
    used: int
    borrowed: int
    unhealthy: int


class QueueFlavorOut(ApiModel):
    """A queue's quota of one flavor (None: no quota) and its use, in GPUs."""

    nominal: int | None
    used: int
    borrowed: int


class OverviewQueueOut(ApiModel):
    name: str
    tenant: str
    flavors: dict[str, QueueFlavorOut]


class ReasonCountOut(ApiModel):
    reason: str
    count: int


class TenantStandingOut(ApiModel):
    """A tenant's decayed usage in weighted resource-hours (GPU-hours under the default
    weights) and its fair-share standing (lower goes first)."""

    name: str
    standing: float
    usage_gpu_hours: float


class OverviewOut(ApiModel):
    at: float
    flavors: list[FlavorGpusOut]
    queues: list[OverviewQueueOut]
    pending_by_reason: list[ReasonCountOut]
    tenants: list[TenantStandingOut]


class UsagePointOut(ApiModel):
    at: float  # the step's end
    gpu_hours: float
    decayed_gpu_hours: float


class TenantUsageOut(ApiModel):
    tenant: str
    points: list[UsagePointOut]


class UsageHistoryOut(ApiModel):
    step: int
    tenants: list[TenantUsageOut]


def overview_out(seen: Overview) -> OverviewOut:
    return OverviewOut(
        at=seen.at,
        flavors=[
            FlavorGpusOut(
                flavor=f.flavor,
                total=f.total,
                free=f.free,
                used=f.used,
                borrowed=f.borrowed,
                unhealthy=f.unhealthy,
            )
            for f in seen.flavors
        ],
        queues=[
            OverviewQueueOut(
                name=q.queue.name,
                tenant=q.queue.tenant,
                flavors={
                    f.flavor: QueueFlavorOut(nominal=f.nominal, used=f.used, borrowed=f.borrowed)
                    for f in q.flavors
                },
            )
            for q in seen.queues
        ],
        pending_by_reason=[ReasonCountOut(reason=r, count=c) for r, c in seen.pending_by_reason],
        tenants=[
            TenantStandingOut(name=t.name, standing=t.standing, usage_gpu_hours=t.usage_gpu_hours)
            for t in seen.tenants
        ],
    )


def usage_history_out(step: int, histories: list[TenantHistory]) -> UsageHistoryOut:
    return UsageHistoryOut(
        step=step,
        tenants=[
            TenantUsageOut(
                tenant=h.tenant,
                points=[
                    UsagePointOut(
                        at=p.at, gpu_hours=p.gpu_hours, decayed_gpu_hours=p.decayed_gpu_hours
                    )
                    for p in h.points
                ],
            )
            for h in histories
        ],
    )
