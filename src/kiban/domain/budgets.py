"""Prices and budgets as the cluster policy declares them, and the pure judgement of a budget.

``prices`` give a price per GPU-hour (and CPU-hour) per flavor, so usage has a cost.
``budgets`` give a tenant (or one of its queues) an allowance per period, in GPU-hours or in
cost, warning thresholds, and what happens at the limit (``BudgetAction``): ``warn`` only warns,
``hold`` keeps new jobs pending (``BudgetExhausted``), ``stop`` also stops running ones. The
control loop's budget gate (``kiban.control.gates``) reads usage and applies these verdicts.

Instants in the policy (``until``, a period's ``start``/``end``) are dates or date-times in UTC;
a date as an end means the end of that day (``until: 2026-12-31`` holds through December 31st).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from kiban.domain.jobspec import SpecModel

MAX_AMOUNT = 1e12  # far above any allowance or price, still exact in a float


def _instant(value: Any) -> date | datetime:
    """A date or date-time as written (YAML gives objects, JSON strings); naive means UTC."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return date.fromisoformat(text)
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"{value!r} is not a date or date-time (examples: 2026-12-31, 2026-12-31T18:00:00Z)"
            ) from None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    raise ValueError("a date (2026-12-31) or a date-time (2026-12-31T18:00:00Z)")


Instant = Annotated[date | datetime, BeforeValidator(_instant)]
"""A date or date-time in the policy (``until``, a period's ``start`` and ``end``)."""


def start_of(value: date | datetime) -> float:
    """Seconds since the epoch at which ``value`` begins (a date: its midnight, UTC)."""
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime(value.year, value.month, value.day, tzinfo=UTC).timestamp()


def end_of(value: date | datetime) -> float:
    """Seconds since the epoch at which ``value`` ends (a date: the midnight after it, UTC)."""
    if isinstance(value, datetime):
        return value.timestamp()
    return start_of(value) + 86400.0  # (date.max has no day after it)


def utc_text(at: float) -> str:
    """``2026-12-01T00:00:00Z``: an instant as the CLI and reasons show it."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- prices ---------------------------------------------------------------------------------------
Price = Annotated[float, Field(ge=0, le=MAX_AMOUNT, allow_inf_nan=False)]


class PriceDecl(SpecModel):
    """``{flavor: h100, gpuHour: 2.5, cpuHour: 0.02}``: what an hour of one GPU (one CPU) of a
    flavor costs; a price is never negative."""

    flavor: str
    gpu_hour: Price = 0.0
    cpu_hour: Price = 0.0


@dataclass(frozen=True, slots=True)
class Prices:
    """Prices per flavor; a flavor without a price costs nothing."""

    gpu_hour: dict[str, float]
    cpu_hour: dict[str, float]

    @classmethod
    def of(cls, decls: list[PriceDecl]) -> Prices:
        return cls({p.flavor: p.gpu_hour for p in decls}, {p.flavor: p.cpu_hour for p in decls})

    def cost(self, flavor: str | None, gpu_seconds: float, cpu_seconds: float) -> float:
        """What ``gpu_seconds`` GPU-seconds and ``cpu_seconds`` CPU-seconds on ``flavor`` cost."""
        if flavor is None:
            return 0.0
        gpu = self.gpu_hour.get(flavor, 0.0) * gpu_seconds / 3600.0
        return gpu + self.cpu_hour.get(flavor, 0.0) * cpu_seconds / 3600.0

    @property
    def highest_gpu_hour(self) -> float:
        """The dearest GPU-hour: what a job not yet placed may cost at most per GPU-hour."""
        return max(self.gpu_hour.values(), default=0.0)


# -- budgets --------------------------------------------------------------------------------------
class BudgetAction(StrEnum):
    """What happens when a budget is used up."""

    WARN = "warn"  # an event and the metric only
    HOLD = "hold"  # new jobs wait (BudgetExhausted); running ones continue
    STOP = "stop"  # new jobs wait, and running ones are stopped


class BudgetUnit(StrEnum):
    """What a budget counts."""

    GPU_HOURS = "gpuHours"
    COST = "cost"


class BudgetState(StrEnum):
    """Where a budget stands in its period (``kiban budgets``)."""

    OK = "ok"
    WARNING = "warning"  # past a warning threshold
    EXHAUSTED = "exhausted"  # used up: its action applies
    INACTIVE = "inactive"  # its custom period has not begun or is over


class BudgetEventReason(StrEnum):
    """Events the budget gate records on a tenant."""

    THRESHOLD = "BudgetThreshold"  # usage passed a warning threshold (once per period)
    EXHAUSTED = "BudgetExhausted"  # usage reached the limit: the action applies
    STOPPED = "BudgetStopped"  # a running job was stopped by a ``stop`` budget
    RELEASED = "BudgetReleased"  # held jobs were let through (new period, extension)


class PeriodWindow(SpecModel):
    """A custom period: ``{start: 2026-12-01, end: 2026-12-31}`` (dates: whole days, UTC)."""

    start: Instant
    end: Instant

    @model_validator(mode="after")
    def _ordered(self) -> PeriodWindow:
        if end_of(self.end) <= start_of(self.start):
            raise ValueError(f"the period ends ({self.end}) before it starts ({self.start})")
        return self


_UNITS = {"gpuHours", "gpu_hours", "cost"}
_BUDGET_KEYS = {"tenant", "queue", "period", "warnAt", "warn_at", "action"}


class BudgetDecl(SpecModel):
    """A tenant's (or a queue's) allowance per period: ``{tenant: vision, period: month,
    gpuHours: 500, warnAt: [0.8, 0.95], action: hold}``; exactly one of ``gpuHours`` and
    ``cost``. ``month`` is the calendar month in UTC."""

    tenant: str
    queue: str | None = None
    period: Literal["month"] | PeriodWindow = "month"
    gpu_hours: float | None = Field(default=None, gt=0, le=MAX_AMOUNT, allow_inf_nan=False)
    cost: float | None = Field(default=None, gt=0, le=MAX_AMOUNT, allow_inf_nan=False)
    warn_at: list[float] = Field(default_factory=lambda: [0.8, 0.95], max_length=10)
    action: BudgetAction = BudgetAction.HOLD

    @model_validator(mode="before")
    @classmethod
    def _one_unit(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        unknown = sorted(str(k) for k in value if k not in _UNITS | _BUDGET_KEYS)
        if unknown:
            raise ValueError(
                f"unknown key {unknown[0]!r}: a budget is in gpuHours or cost (with tenant, "
                "queue, period, warnAt, action)"
            )
        units = [k for k in value if k in _UNITS and value[k] is not None]
        if not units:
            raise ValueError("give the budget's amount: gpuHours: N or cost: N")
        if len(units) > 1:
            raise ValueError("a budget is in gpuHours or in cost, not both")
        return value

    @field_validator("period", mode="plain")
    @classmethod
    def _period(cls, value: Any) -> Literal["month"] | PeriodWindow:
        if value == "month":
            return "month"
        if isinstance(value, PeriodWindow):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"{value!r} is not a period: month, or {{start: DATE, end: DATE}}")
        try:
            return PeriodWindow.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(
                f"{where + ': ' if where else ''}{first['msg'].removeprefix('Value error, ')}"
            ) from None

    @field_validator("warn_at")
    @classmethod
    def _thresholds(cls, value: list[float]) -> list[float]:
        for threshold in value:
            if math.isnan(threshold) or not 0 < threshold <= 1:
                raise ValueError(
                    f"{threshold} is not a fraction of the budget in (0, 1] "
                    "(e.g. warnAt: [0.8, 0.95])"
                )
        return value

    @property
    def unit(self) -> BudgetUnit:
        return BudgetUnit.GPU_HOURS if self.gpu_hours is not None else BudgetUnit.COST

    @property
    def amount(self) -> float:
        """The allowance in its unit (GPU-hours or cost)."""
        return self.gpu_hours if self.gpu_hours is not None else float(self.cost or 0.0)

    @property
    def key(self) -> str:
        """``vision`` or ``vision/train``: what extensions and events name."""
        return budget_key(self.tenant, self.queue)


def budget_key(tenant: str, queue: str | None) -> str:
    return tenant if queue is None else f"{tenant}/{queue}"


def month_window(now: float) -> tuple[float, float]:
    """The calendar month (UTC) holding ``now``: its first instant and the next month's."""
    moment = datetime.fromtimestamp(now, UTC)
    start = datetime(moment.year, moment.month, 1, tzinfo=UTC)
    following = datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=UTC)
    return start.timestamp(), following.timestamp()


def period_window(decl: BudgetDecl, now: float) -> tuple[float, float] | None:
    """The period of ``decl`` holding ``now``, ``[start, end)``; None outside a custom one."""
    if decl.period == "month":
        return month_window(now)
    assert isinstance(decl.period, PeriodWindow)
    start, end = start_of(decl.period.start), end_of(decl.period.end)
    return (start, end) if start <= now < end else None


# -- judging a budget -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Standing:
    """A budget in its current period: ``used`` and ``limit`` in its unit (the limit with any
    extension granted), the period ``[start, end)``."""

    decl: BudgetDecl
    used: float
    limit: float
    start: float
    end: float
    extended: float = 0.0  # of ``limit``, what extensions add

    @property
    def ratio(self) -> float:
        return self.used / self.limit if self.limit > 0 else math.inf

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit

    @property
    def state(self) -> BudgetState:
        if self.exhausted:
            return BudgetState.EXHAUSTED
        if any(self.ratio >= t for t in self.decl.warn_at):
            return BudgetState.WARNING
        return BudgetState.OK

    @property
    def holds_new_jobs(self) -> bool:
        return self.exhausted and self.decl.action is not BudgetAction.WARN

    @property
    def stops_running(self) -> bool:
        return self.exhausted and self.decl.action is BudgetAction.STOP

    def crossed(self) -> list[float]:
        """The warning thresholds the usage has reached, lowest first."""
        return sorted(t for t in set(self.decl.warn_at) if self.ratio >= t)

    def figures(self) -> dict[str, Any]:
        """The numbers a ``BudgetExhausted`` reason carries."""
        return {
            "budget": self.decl.key,
            "unit": self.decl.unit.value,
            "used": round(self.used, 6),
            "limit": round(self.limit, 6),
            "extended": round(self.extended, 6),
            "periodStart": utc_text(self.start),
            "periodEnd": utc_text(self.end),
            "action": self.decl.action.value,
        }

    def amount_text(self, amount: float) -> str:
        if self.decl.unit is BudgetUnit.GPU_HOURS:
            return f"{amount:.1f} GPU-hours"
        return f"{amount:.2f}"

    def exhausted_message(self) -> str:
        """``budget vision: used 501.2 GPU-hours of 500.0 (month until ...)``."""
        return (
            f"budget {self.decl.key} is used up: {self.amount_text(self.used)} of "
            f"{self.amount_text(self.limit)} in the period ending {utc_text(self.end)}"
        )


def job_would_cross(standing: Standing, job_amount: float) -> bool:
    """Whether a job that may use ``job_amount`` (its maxRuntime x GPUs, in the budget's unit)
    would take the budget past its limit were it started now (a ``warn`` budget holds none)."""
    if standing.decl.action is BudgetAction.WARN:
        return False
    return standing.used + job_amount > standing.limit


def crossing_message(standing: Standing, job_amount: float) -> str:
    return (
        f"budget {standing.decl.key}: its maxRuntime may use {standing.amount_text(job_amount)}, "
        f"but only {standing.amount_text(max(standing.limit - standing.used, 0.0))} of "
        f"{standing.amount_text(standing.limit)} are left until {utc_text(standing.end)}"
    )
