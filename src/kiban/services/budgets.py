"""Budgets in the store: usage and cost in a budget's period, extensions granted by admins, and
the budget gate's pass that holds, releases and stops jobs (``kiban budgets``).

Usage is read from the undecayed usage records through ``services.accounting.held_in_window``
(GPU- and CPU-seconds per flavor, so that usage can be priced): the same window rule as
``kiban usage``, so a budget's figure and the usage report agree.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, defer

from kiban.domain.budgets import (
    BudgetAction,
    BudgetDecl,
    BudgetEventReason,
    BudgetUnit,
    Prices,
    Standing,
    budget_key,
    crossing_message,
    job_would_cross,
    period_window,
    utc_text,
)
from kiban.domain.cluster import ClusterPolicy
from kiban.domain.job_relations import JobGate
from kiban.domain.manifests import parse_job_manifest
from kiban.domain.states import JobState
from kiban.scheduler.feasibility import usable_flavors
from kiban.scheduler.reasons import ReasonCode
from kiban.services import events
from kiban.services.accounting import HeldOnFlavor, held_in_window
from kiban.services.auth import Principal
from kiban.services.errors import NotFound, invalid
from kiban.services.jobs import stop_unended
from kiban.services.quota_ledger import queue_view
from kiban.store.models import Job, Queue
from kiban.store.models_accounting import BudgetExtension, BudgetMark

log = logging.getLogger("kiban.control")

EXHAUSTED_MARK = "exhausted"
_RUNNING = (JobState.ADMITTED.value, JobState.RUNNING.value)


# -- usage and cost -------------------------------------------------------------------------------
def gpu_hours_of(held: Iterable[HeldOnFlavor]) -> float:
    return sum(h.gpu_seconds for h in held) / 3600.0


def cost_of(held: Iterable[HeldOnFlavor], prices: Prices) -> float:
    """What the usage costs at ``prices`` (a flavor without a price costs nothing)."""
    return sum(prices.cost(h.flavor, h.gpu_seconds, h.cpu_seconds) for h in held)


def used_amount(
    session: Session, decl: BudgetDecl, prices: Prices, start: float, end: float, now: float
) -> float:
    """What a budget has used of its period so far, in its unit."""
    held = held_in_window(
        session, tenant=decl.tenant, queue=decl.queue, since=start, until=end, now=now
    )
    return gpu_hours_of(held) if decl.unit is BudgetUnit.GPU_HOURS else cost_of(held, prices)


# -- extensions -----------------------------------------------------------------------------------
def _extensions(session: Session, keys: Sequence[str], now: float) -> dict[tuple[str, str], float]:
    """What the extensions holding at ``now`` add, per (budget, unit)."""
    if not keys:
        return {}
    query = select(BudgetExtension.budget, BudgetExtension.unit, BudgetExtension.amount).where(
        BudgetExtension.budget.in_(keys),
        BudgetExtension.granted_at <= now,
        BudgetExtension.until > now,
    )
    added: dict[tuple[str, str], float] = {}
    for budget, unit, amount in session.execute(query):
        added[(budget, unit)] = added.get((budget, unit), 0.0) + float(amount)
    return added


def standings(session: Session, policy: ClusterPolicy, now: float) -> list[Standing]:
    """Every budget whose period holds ``now``, with its usage and limit (extensions added)."""
    windows = [(decl, period_window(decl, now)) for decl in policy.budgets]
    active = [(decl, window) for decl, window in windows if window is not None]
    added = _extensions(session, [decl.key for decl, _ in active], now)
    prices = policy.price_table
    found = []
    for decl, (start, end) in active:
        extended = added.get((decl.key, decl.unit.value), 0.0)
        used = used_amount(session, decl, prices, start, end, now)
        found.append(Standing(decl, used, decl.amount + extended, start, end, extended))
    return found


def grant_extension(
    session: Session,
    principal: Principal,
    policy: ClusterPolicy,
    *,
    tenant: str,
    queue: str | None,
    gpu_hours: float | None,
    cost: float | None,
    until: float | None,
    now: float,
    note: str | None = None,
) -> BudgetExtension:
    """Record an extension of a budget (admins only): ``gpu_hours`` or ``cost`` more until
    ``until`` (None: the end of the budget's current period). NotFound for a budget the policy
    does not declare; InvalidInput naming the field for an amount in the wrong unit."""
    principal.require_admin()
    key = budget_key(tenant, queue)
    decl = next((b for b in policy.budgets if b.key == key), None)
    if decl is None:
        declared = ", ".join(b.key for b in policy.budgets) or "none"
        raise NotFound(f"no budget {key} in the policy (declared: {declared})")
    if (gpu_hours is None) == (cost is None):
        raise invalid("gpuHours", "give the extension in gpuHours or in cost (one of them)")
    unit = BudgetUnit.GPU_HOURS if gpu_hours is not None else BudgetUnit.COST
    amount = float(gpu_hours if gpu_hours is not None else cost or 0.0)
    field_name = unit.value
    if unit is not decl.unit:
        raise invalid(field_name, f"budget {key} is in {decl.unit.value}, not {unit.value}")
    if not 0 < amount <= 1e12:
        raise invalid(field_name, f"{amount:g} is not a positive amount")
    window = period_window(decl, now)
    if until is None:
        if window is None:
            raise invalid("until", f"budget {key}'s period does not hold now; give until")
        until = window[1]
    if until <= now:
        raise invalid("until", f"{utc_text(until)} has passed")
    row = BudgetExtension(
        budget=key,
        unit=unit.value,
        amount=amount,
        granted_at=now,
        until=until,
        granted_by=principal.name,
        note=note,
    )
    session.add(row)
    events.record(
        session,
        kind="Tenant",
        name=tenant,
        tenant=tenant,
        reason="BudgetExtended",
        message=(
            f"{principal.name} extended budget {key} by {amount:g} {unit.value} until "
            f"{utc_text(until)}"
        ),
        at=now,
    )
    session.flush()
    return row


def list_extensions(
    session: Session, principal: Principal, tenant: str | None = None
) -> list[BudgetExtension]:
    """Extensions granted, newest first: all for an admin, their tenant's for a member."""
    query = select(BudgetExtension).order_by(BudgetExtension.id.desc())
    rows = list(session.scalars(query))
    return [
        r
        for r in rows
        if principal.can_see(r.budget.split("/")[0])
        and (tenant is None or r.budget.split("/")[0] == tenant)
    ]


def visible_standings(
    session: Session, principal: Principal, policy: ClusterPolicy, now: float
) -> list[Standing]:
    """The budgets the caller may see (their tenant's; every one for an admin) as they stand."""
    shown = policy.model_copy(
        update={"budgets": [b for b in policy.budgets if principal.can_see(b.tenant)]}
    )
    return standings(session, shown, now)


# -- the gate's pass ------------------------------------------------------------------------------
@dataclass
class BudgetPass:
    """What one pass of the budget gate did (for tests and the loop's log)."""

    held: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.held or self.released or self.stopped)


class MaxRuntimes:
    """Jobs' maxRuntime in seconds (None: none), parsed once per job; and the marks (thresholds
    reached per budget and period) already recorded, so a pass does not read them again."""

    def __init__(self) -> None:
        self._seen: dict[str, float | None] = {}
        self.marks: set[tuple[str, float, str]] = set()

    def of(self, job: Job) -> float | None:
        if job.id not in self._seen:
            if len(self._seen) > 100_000:
                self._seen.clear()
            self._seen[job.id] = parse_job_manifest(job.spec).spec.max_runtime
        return self._seen[job.id]


def _applies(standing: Standing, job: Job) -> bool:
    decl = standing.decl
    return job.tenant == decl.tenant and (decl.queue is None or job.queue == decl.queue)


class QueuePrices:
    """The dearest GPU-hour each queue's jobs may run at, found once per pass.

    Which flavor a job runs on is known only once it is placed, but it is one of the flavors
    its queue may use (its quota's flavors, all with no quota, less those restricted to other
    queues; at ``now``, with a time-bounded allocation): a queue of one flavor prices its jobs
    at that flavor's price. A queue the store does not hold, or one with no usable flavor,
    falls back to the dearest GPU-hour the policy prices."""

    def __init__(self, session: Session, policy: ClusterPolicy, now: float) -> None:
        self._session = session
        self._policy = policy
        self._now = now
        self._flavors = {f.name: f for f in policy.flavor_views()}
        self._prices = policy.price_table
        self._found: dict[str, float] = {}

    def gpu_hour(self, queue: str) -> float:
        if queue not in self._found:
            row = self._session.get(Queue, queue)
            usable: tuple[str, ...] = ()
            if row is not None:
                view = queue_view(row, self._policy, now=self._now)
                usable = usable_flavors(view, self._flavors)
            self._found[queue] = (
                max(self._prices.gpu_hour.get(f, 0.0) for f in usable)
                if usable
                else self._prices.highest_gpu_hour
            )
        return self._found[queue]


def _job_amount(standing: Standing, job: Job, max_runtime: float, prices: QueuePrices) -> float:
    """What a job may use at most, by its maxRuntime, in the budget's unit (cost at the dearest
    GPU-hour of the flavors its queue may use: ``QueuePrices``)."""
    gpu_hours = (job.gpus or 0) * max_runtime / 3600.0
    if standing.decl.unit is BudgetUnit.GPU_HOURS:
        return gpu_hours
    return gpu_hours * prices.gpu_hour(job.queue)


def _verdict(
    standings_of_job: list[Standing], job: Job, runtimes: MaxRuntimes, prices: QueuePrices
) -> tuple[str, dict[str, Any]] | None:
    """Why a pending job is held by a budget (message and figures), or None."""
    for standing in standings_of_job:
        if standing.holds_new_jobs:
            return standing.exhausted_message(), standing.figures()
    for standing in standings_of_job:
        max_runtime = runtimes.of(job) if (job.gpus or 0) > 0 else None
        if max_runtime is None:
            continue
        amount = _job_amount(standing, job, max_runtime, prices)
        if job_would_cross(standing, amount):
            figures = {**standing.figures(), "job": round(amount, 6), "maxRuntime": max_runtime}
            return crossing_message(standing, amount), figures
    return None


def _mark(
    session: Session, standing: Standing, mark: str, now: float, known: set[tuple[str, float, str]]
) -> bool:
    """Record that ``standing`` reached ``mark`` this period; False when it already had."""
    key = (standing.decl.key, standing.start, mark)
    if key in known:
        return False
    known.add(key)  # (if this pass's transaction fails, a restart reads the store again)
    if session.get(BudgetMark, key) is not None:
        return False
    session.add(BudgetMark(budget=key[0], period_start=key[1], mark=key[2], at=now))
    return True


def _warn(
    session: Session,
    standing: Standing,
    now: float,
    done: BudgetPass,
    known: set[tuple[str, float, str]],
) -> None:
    decl = standing.decl

    def warn(reason: BudgetEventReason, message: str) -> None:
        events.record(
            session,
            kind="Tenant",
            name=decl.tenant,
            tenant=decl.tenant,
            reason=reason.value,
            message=message,
            at=now,
            warning=True,
        )
        done.events.append(message)

    for threshold in standing.crossed():
        if _mark(session, standing, f"{threshold:g}", now, known):
            warn(
                BudgetEventReason.THRESHOLD,
                f"budget {decl.key} passed {threshold:.0%}: "
                f"{standing.amount_text(standing.used)} of {standing.amount_text(standing.limit)} "
                f"used in the period ending {utc_text(standing.end)}",
            )
    if standing.exhausted and _mark(session, standing, EXHAUSTED_MARK, now, known):
        warn(
            BudgetEventReason.EXHAUSTED,
            f"{standing.exhausted_message()}; action {decl.action.value}",
        )


def apply_budgets(
    session: Session,
    policy: ClusterPolicy,
    now: float,
    runtimes: MaxRuntimes | None = None,
) -> tuple[BudgetPass, list[Standing]]:
    """One pass of the budget gate: warn at thresholds, hold pending jobs a budget keeps back
    (``JobGate.BUDGET``, ``BudgetExhausted`` with its figures), release those no budget keeps
    back any longer (a new period, an extension, a budget removed), and stop running jobs of a
    ``stop`` budget used up. The caller commits."""
    runtimes = runtimes or MaxRuntimes()
    done = BudgetPass()
    current = standings(session, policy, now)
    for standing in current:
        _warn(session, standing, now, done, runtimes.marks)
    prices = QueuePrices(session, policy, now)
    tenants = {s.decl.tenant for s in current if s.decl.action is not BudgetAction.WARN}
    query = (
        select(Job)
        .options(defer(Job.spec))  # read only for a maxRuntime not known yet
        .where(
            Job.state == JobState.PENDING.value,
            or_(Job.gate.is_(None), Job.gate == JobGate.BUDGET.value),
        )
    )
    if tenants:
        query = query.where(or_(Job.tenant.in_(tenants), Job.gate == JobGate.BUDGET.value))
    else:
        query = query.where(Job.gate == JobGate.BUDGET.value)
    for job in session.scalars(query):
        verdict = _verdict([s for s in current if _applies(s, job)], job, runtimes, prices)
        if verdict is not None:
            message, figures = verdict
            if job.gate != JobGate.BUDGET.value or job.reason_message != message:
                if job.gate != JobGate.BUDGET.value:
                    done.held.append(job.id)
                job.gate = JobGate.BUDGET.value
                job.reason_code = ReasonCode.BUDGET_EXHAUSTED.value
                job.reason_message = message
                job.reason_details = figures
                job.queue_position = None
                job.eta = None
        elif job.gate == JobGate.BUDGET.value:
            job.gate = None
            job.reason_code = job.reason_message = None
            job.reason_details = None
            done.released.append(job.id)
    for standing in current:
        if standing.stops_running:
            _stop_running(session, standing, now, done)
    return done, current


def _stop_running(session: Session, standing: Standing, now: float, done: BudgetPass) -> None:
    decl = standing.decl
    query = select(Job).where(Job.state.in_(_RUNNING), Job.tenant == decl.tenant)
    if decl.queue is not None:
        query = query.where(Job.queue == decl.queue)
    for job in session.scalars(query):
        stop_unended(session, job, f"stopped: {standing.exhausted_message()}", now)
        events.record_for_job(
            session,
            job,
            BudgetEventReason.STOPPED.value,
            f"budget {decl.key} is used up and its action is stop",
            now,
            warning=True,
        )
        done.stopped.append(job.id)


def release_all(session: Session) -> list[str]:
    """Let every job a budget held through (no budget is declared any more)."""
    ids = list(session.scalars(select(Job.id).where(Job.gate == JobGate.BUDGET.value)))
    if ids:
        session.execute(
            update(Job)
            .where(Job.id.in_(ids))
            .values(gate=None, reason_code=None, reason_message=None, reason_details=None)
        )
    return ids
