"""Each tenant's GPU use over time, from the store's record of when replicas ran.

A replica holds its GPUs from ``started_at`` until ``finished_at`` (its job's end when the
replica's own was not recorded; ``now`` while it is active). The window ``[now - hours, now)``
is cut into steps; a step's ``gpuHours`` is the GPU-time its replicas held within it, exactly
(pieces of a step count as they overlap it). ``decayedGpuHours`` is the fair-share usage those
GPUs alone make at the step's end under the policy's half-life (``kiban.domain.usage``: each
piece accrued exactly, then decayed), including what ran before the window within
``LOOKBACK_HALF_LIVES`` half-lives, so the curve starts where the tenant stood.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from kiban.domain.usage import accrue, decay
from kiban.services.auth import Principal
from kiban.services.errors import invalid
from kiban.store.models import Job, Replica, Tenant

SECONDS_PER_HOUR = 3600.0
MAX_HOURS = 24 * 366
MIN_STEP_S = 60
MAX_POINTS = 2000
LOOKBACK_HALF_LIVES = 8
"""Usage older than this many half-lives weighs under 0.4% of what it did: not read."""


@dataclass(frozen=True, slots=True)
class UsagePoint:
    at: float  # the step's end
    gpu_hours: float
    decayed_gpu_hours: float


@dataclass(frozen=True, slots=True)
class TenantHistory:
    tenant: str
    points: tuple[UsagePoint, ...]


@dataclass(frozen=True, slots=True)
class Held:
    """GPUs one replica held, from ``start`` to ``end``."""

    tenant: str
    gpus: int
    start: float
    end: float


def window(hours: float, step_s: int) -> tuple[int, int]:
    """The number of steps in the window and their length: ``step_s``, or longer where that
    would make more than ``MAX_POINTS`` points (InvalidInput naming a field that is wrong)."""
    if not 0 < hours <= MAX_HOURS:
        raise invalid("hours", f"must be above 0 and at most {MAX_HOURS}")
    if step_s < MIN_STEP_S:
        raise invalid("step", f"must be at least {MIN_STEP_S} seconds")
    span = hours * SECONDS_PER_HOUR
    step_s = max(step_s, math.ceil(span / MAX_POINTS))
    return max(1, math.ceil(span / step_s)), step_s


def usage_history(
    session: Session,
    principal: Principal,
    *,
    now: float,
    hours: float,
    step_s: int,
    half_life_s: float,
) -> tuple[int, list[TenantHistory]]:
    """The step taken (see ``window``) and the visible tenants' GPU-hours and decayed
    GPU-hours per step, oldest step first."""
    steps, step_s = window(hours, step_s)
    start = now - steps * step_s
    held = _held(session, principal, since=start - LOOKBACK_HALF_LIVES * half_life_s, now=now)
    tenants = _tenants(session, principal) | {h.tenant for h in held}
    return step_s, [
        TenantHistory(
            tenant,
            series(
                [h for h in held if h.tenant == tenant],
                start=start,
                step_s=step_s,
                steps=steps,
                half_life_s=half_life_s,
            ),
        )
        for tenant in sorted(tenants)
    ]


def series(
    held: list[Held], *, start: float, step_s: int, steps: int, half_life_s: float
) -> tuple[UsagePoint, ...]:
    """One tenant's points (a pure function of the replicas' intervals)."""
    decayed = 0.0  # GPU-seconds, as of ``start``
    for h in held:
        if h.start < start:
            piece_end = min(h.end, start)
            decayed += decay(
                accrue(0.0, h.gpus, piece_end - h.start, half_life_s),
                start - piece_end,
                half_life_s,
            )
    used = [0.0] * steps  # GPU-seconds held within each step
    added = [0.0] * steps  # what they add to the decayed usage at the step's end
    for h in held:
        first = max(0, int((h.start - start) // step_s))
        last = min(steps - 1, int((h.end - start) // step_s))
        for i in range(first, last + 1):  # only the steps the replica overlaps
            lo, hi = start + i * step_s, start + (i + 1) * step_s
            a, b = max(lo, h.start), min(hi, h.end)
            if b > a:
                used[i] += h.gpus * (b - a)
                added[i] += decay(accrue(0.0, h.gpus, b - a, half_life_s), hi - b, half_life_s)
    points = []
    for i in range(steps):
        decayed = decay(decayed, step_s, half_life_s) + added[i]
        hi = start + (i + 1) * step_s
        points.append(UsagePoint(hi, used[i] / SECONDS_PER_HOUR, decayed / SECONDS_PER_HOUR))
    return tuple(points)


def _held(session: Session, principal: Principal, *, since: float, now: float) -> list[Held]:
    """What every visible replica held that ended after ``since`` and started before ``now``."""
    end = func.coalesce(Replica.finished_at, Job.finished_at)
    query = (
        select(Job.tenant, Replica.gpu_ids, Replica.started_at, end, Replica.active)
        .join(Job, Job.id == Replica.job_id)
        .where(
            Replica.started_at.is_not(None),
            Replica.started_at < now,
            or_(end.is_(None), end > since),
        )
    )
    if not principal.is_admin:
        query = query.where(Job.tenant == principal.tenant)
    result = []
    for tenant, gpu_ids, started, ended, active in session.execute(query).all():
        gpus = len(gpu_ids or [])
        if ended is None:
            if not active:
                continue  # ended with no time recorded: nothing to say how long it ran
            ended = now
        if gpus and ended > started:
            result.append(Held(tenant, gpus, float(started), min(float(ended), now)))
    return result


def _tenants(session: Session, principal: Principal) -> set[str]:
    if principal.is_admin:
        return set(session.scalars(select(Tenant.name)))
    return {principal.tenant} if principal.tenant is not None else set()
