"""Bodies of ``/api/v1/budgets``: budgets as they stand, and extensions granted."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kiban.domain.budgets import Instant, Standing, end_of
from kiban.store.models_accounting import BudgetExtension


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class BudgetOut(_Model):
    """One budget in its current period: used and limit in its unit (extensions included)."""

    budget: str
    tenant: str
    queue: str | None
    unit: str
    used: float
    limit: float
    extended: float
    ratio: float
    state: str
    action: str
    warn_at: list[float]
    period_start: float
    period_end: float


def budget_out(standing: Standing) -> BudgetOut:
    decl = standing.decl
    return BudgetOut(
        budget=decl.key,
        tenant=decl.tenant,
        queue=decl.queue,
        unit=decl.unit.value,
        used=standing.used,
        limit=standing.limit,
        extended=standing.extended,
        ratio=standing.ratio,
        state=standing.state.value,
        action=decl.action.value,
        warn_at=list(decl.warn_at),
        period_start=standing.start,
        period_end=standing.end,
    )


class ExtensionIn(_Model):
    """An extension to grant: ``gpuHours`` or ``cost`` more until ``until`` (a date or
    date-time, UTC; absent: the end of the budget's current period)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    tenant: str = Field(min_length=1, max_length=63)
    queue: str | None = Field(default=None, min_length=1, max_length=63)
    gpu_hours: float | None = Field(default=None, allow_inf_nan=False)
    cost: float | None = Field(default=None, allow_inf_nan=False)
    until: Instant | None = None
    note: str | None = Field(default=None, max_length=1000)

    @property
    def until_s(self) -> float | None:
        return None if self.until is None else end_of(self.until)


class ExtensionOut(_Model):
    """An extension granted: by whom, when, how much, until when."""

    id: int
    budget: str
    unit: str
    amount: float
    granted_at: float
    granted_by: str
    until: float
    note: str | None


def extension_out(row: BudgetExtension) -> ExtensionOut:
    return ExtensionOut(
        id=row.id,
        budget=row.budget,
        unit=row.unit,
        amount=row.amount,
        granted_at=row.granted_at,
        granted_by=row.granted_by,
        until=row.until,
        note=row.note,
    )
