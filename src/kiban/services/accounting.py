"""Usage accounting in the store: a record opened when an attempt starts, closed once when it
is settled, and the reports read from those records (``kiban usage``, ``GET /api/v1/usage``).

Records are undecayed (``kiban.domain.accounting``); fair share's decayed usage lives in
``kiban.services.usage``. A record is opened in the transaction that places the attempt
(``launcher``) and closed in the one that ends it (``transitions.transition``), so a crash
leaves it exactly as the job is: an attempt re-adopted after a restart keeps its open record,
one settled afterwards closes it then; a partial unique index keeps one open record per job.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Float,
    and_,
    case,
    func,
    literal,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.orm import Session

from kiban.domain.accounting import AttemptOutcome, UsageKind
from kiban.domain.service_replica import SERVICE_LABEL
from kiban.domain.states import JobState
from kiban.domain.stop_intents import StopIntent
from kiban.services.auth import Principal
from kiban.services.errors import invalid
from kiban.services.policy import current_policy
from kiban.store.models import Job, Replica
from kiban.store.models_accounting import UsageRecord

HOUR = 3600.0
WIDE_WINDOW_S = 7 * 24 * HOUR
"""A report's window wider than this reads the whole table on SQLite (see ``usage_report``)."""
MAX_PERIODS = 1000
"""The most periods one report splits its window into (a year and a half of days)."""


# -- recording ---------------------------------------------------------------------------------


def attempt_outcome(to: JobState, intent: StopIntent | None) -> AttemptOutcome:
    """How an attempt ended, from the state its job moves to and why it was stopped.

    Back in its queue: preempted, or lost with a node (an unhealthy node's requeue, replicas
    vanished); with no intent it is a launch cut short by a restart of the control plane.
    Moved straight to Admitted again: a replica failed and the job restarts (a failed attempt).
    """
    if to is JobState.SUCCEEDED:
        return AttemptOutcome.SUCCEEDED
    if to is JobState.CANCELLED:
        return AttemptOutcome.CANCELLED
    if to in (JobState.FAILED, JobState.ADMITTED):
        return AttemptOutcome.FAILED
    if intent is StopIntent.PREEMPT:
        return AttemptOutcome.PREEMPTED
    if intent in (StopIntent.REQUEUE, StopIntent.LOST):
        return AttemptOutcome.NODE_LOST
    return AttemptOutcome.STOPPED


def ends_attempt(current: JobState, to: JobState) -> bool:
    """Whether a job's move from ``current`` to ``to`` ends the attempt that holds resources."""
    if not current.holds_resources:
        return False
    return to is JobState.PENDING or to.terminal or (to is JobState.ADMITTED and current != to)


def usage_kind(job: Job) -> UsageKind:
    """A service's replica (its job carries the service label) or a job of its own."""
    labels = (job.spec.get("metadata") or {}).get("labels") or {}
    return UsageKind.SERVICE if SERVICE_LABEL in labels else UsageKind.JOB


@dataclass(frozen=True, slots=True)
class LastRecord:
    """A job's newest usage record: when it ended (None: open, about to be closed as the job
    is placed again) and on which flavor."""

    ended_at: float | None
    flavor: str | None


def last_records(session: Session, job_ids: Sequence[str]) -> dict[str, LastRecord]:
    """Each job's newest record, for jobs about to start an attempt (one query for a batch)."""
    if not job_ids:
        return {}
    newest = (
        select(func.max(UsageRecord.id))
        .where(
            UsageRecord.kind.in_([k.value for k in UsageKind]),
            UsageRecord.job_id.in_(job_ids),
        )
        .group_by(UsageRecord.job_id)
    )
    rows = session.execute(
        select(UsageRecord.job_id, UsageRecord.ended_at, UsageRecord.flavor).where(
            UsageRecord.id.in_(newest)
        )
    )
    return {job_id: LastRecord(ended, flavor) for job_id, ended, flavor in rows}


def open_attempt(
    session: Session,
    job: Job,
    replicas: Sequence[Replica],
    at: float,
    flavor: str | None = None,
    last: LastRecord | None = None,
) -> None:
    """Open the record of the job's current attempt, holding ``replicas`` from ``at`` (not
    committed). ``last``: the job's newest record before this one (``last_records``): when it
    ended, and its flavor for a relaunch on the nodes it held (``flavor`` None)."""
    previous_ended = None
    if last is not None:
        previous_ended = at if last.ended_at is None else last.ended_at  # closed at ``at`` now
        flavor = flavor if flavor is not None else last.flavor
    session.add(
        UsageRecord(
            kind=usage_kind(job).value,
            job_id=job.id,
            attempt=job.attempt,
            tenant=job.tenant,
            member=job.submitted_by,
            queue=job.queue,
            flavor=flavor,
            gpus=sum(len(r.gpu_ids) for r in replicas),
            cpu_millis=sum(r.cpu_millis for r in replicas),
            memory=sum(r.memory for r in replicas),
            started_at=at,
            previous_ended_at=previous_ended,
        )
    )


def close_attempt(session: Session, job_id: str, outcome: AttemptOutcome, at: float) -> None:
    """Close the job's open record, if it has one, as ended at ``at`` with ``outcome`` (not
    committed). Once: a record already closed is left as it is. A service replica cancelled
    (scaled down, replaced) is recorded as stopped."""
    as_service = AttemptOutcome.STOPPED if outcome is AttemptOutcome.CANCELLED else outcome
    held = case(
        (UsageRecord.started_at < at, at - UsageRecord.started_at), else_=literal(0.0, Float)
    )
    session.execute(
        update(UsageRecord)
        .where(UsageRecord.job_id == job_id, UsageRecord.ended_at.is_(None))
        .values(
            ended_at=case((UsageRecord.started_at < at, at), else_=UsageRecord.started_at),
            gpu_seconds=UsageRecord.gpus * held,
            outcome=case(
                (UsageRecord.kind == UsageKind.SERVICE.value, as_service.value),
                else_=outcome.value,
            ),
        )
        .execution_options(synchronize_session=False)
    )


# -- usage in a window: the one rule reports and budgets follow ---------------------------------


def _larger(a: Any, b: Any) -> ColumnElement[Any]:
    return case((a > b, a), else_=b)


def _smaller(a: Any, b: Any) -> ColumnElement[Any]:
    return case((a < b, a), else_=b)


def held_end(now: float) -> ColumnElement[Any]:
    """Where a record's holding ends as of ``now``: its recorded end when closed, ``now`` while
    it is open.

    A closed record counts up to its recorded end even when that lies after ``now``. The loop
    closes a record at its own now, so such an end comes only from a clock stepped back since;
    the end is still what happened, and counting it as recorded keeps a budget's figure equal
    to ``kiban usage``'s for the same window, and keeps a clock stepped back from giving a
    tenant GPU-hours back (releasing jobs its budget held, to hold them again as the clock
    catches up). An open record started after ``now`` (the same stepped clock) holds nothing
    yet.
    """
    return func.coalesce(UsageRecord.ended_at, now)


def held_seconds(lo: Any, hi: Any, now: float) -> ColumnElement[Any]:
    """The seconds a record held inside ``[lo, hi)`` as of ``now`` (see ``held_end``); only
    meaningful where ``holds_within`` is true."""
    return _smaller(held_end(now), hi) - _larger(UsageRecord.started_at, lo)


def holds_within(lo: Any, hi: Any, now: float) -> ColumnElement[bool]:
    """Whether a record falls within ``[lo, hi)`` as of ``now``: it overlaps the window, and is
    closed or started by ``now`` (one just started counts as an attempt that held nothing yet;
    an open one started after ``now`` is left out, not counted as negative time)."""
    end = held_end(now)
    return and_(UsageRecord.started_at < hi, end > lo, end >= UsageRecord.started_at)


def overlapping(since: float, until: float, started: Any = UsageRecord.started_at) -> Any:
    """The indexable part of ``holds_within`` for a fixed window: records started before
    ``until`` and open or ended after ``since`` (``started``: the column as the query reads
    it)."""
    return and_(started < until, or_(UsageRecord.ended_at.is_(None), UsageRecord.ended_at > since))


@dataclass(frozen=True, slots=True)
class HeldOnFlavor:
    """What records held inside a window on one flavor (None: no known flavor): GPU-seconds
    and CPU-seconds, what a budget counts and prices."""

    flavor: str | None
    gpu_seconds: float
    cpu_seconds: float


def held_in_window(
    session: Session,
    *,
    tenant: str,
    since: float,
    until: float,
    now: float,
    queue: str | None = None,
) -> list[HeldOnFlavor]:
    """What a tenant (or one of its queues) held within ``[since, until)`` as of ``now``, per
    flavor: each record clipped to the window, an open one counted up to ``now``
    (``held_end``). One aggregating query; what budgets are held against."""
    lo, hi = literal(since, Float), literal(until, Float)
    held = held_seconds(lo, hi, now)
    conditions = [
        UsageRecord.tenant == tenant,
        overlapping(since, until),
        holds_within(lo, hi, now),
    ]
    if queue is not None:
        conditions.append(UsageRecord.queue == queue)
    query = (
        select(
            UsageRecord.flavor,
            func.sum(UsageRecord.gpus * held),
            func.sum(UsageRecord.cpu_millis * held),
        )
        .where(*conditions)
        .group_by(UsageRecord.flavor)
    )
    return [
        HeldOnFlavor(flavor, float(gpu_s or 0.0), float(cpu_ms or 0.0) / 1000)
        for flavor, gpu_s, cpu_ms in session.execute(query)
    ]


def gpu_seconds_used(
    session: Session,
    *,
    tenant: str,
    since: float,
    until: float,
    now: float,
    queue: str | None = None,
) -> float:
    """GPU-seconds a tenant (or one of its queues) held within ``[since, until)`` as of ``now``
    (``held_in_window`` summed over flavors)."""
    held = held_in_window(session, tenant=tenant, since=since, until=until, now=now, queue=queue)
    return sum(h.gpu_seconds for h in held)


# -- reports -----------------------------------------------------------------------------------


class UsageGroup(StrEnum):
    """What a usage report's rows are per (``kiban usage --by``)."""

    TENANT = "tenant"
    USER = "user"
    QUEUE = "queue"
    FLAVOR = "flavor"
    JOB = "job"


class Granularity(StrEnum):
    """How a report splits its window into periods (UTC calendar days, ISO weeks, months)."""

    DAY = "day"
    WEEK = "week"
    MONTH = "month"


Pricing = Callable[[str | None, float, float], float]
"""The cost of ``gpu_hours`` and ``cpu_hours`` (2nd and 3rd arguments) held on a flavor (the
1st; None: a record of no known flavor): what a report's ``cost`` column is summed from, per
row, period and flavor. The budgets' prices plug in here."""


def pricing(session: Session) -> Pricing | None:
    """The prices reports cost usage at: None while the policy sets none (no ``cost`` column).

    The one place the policy's prices per GPU-hour and CPU-hour per flavor come in; the API
    and ``kiban usage`` report through it.
    """
    policy = current_policy(session)
    if not policy.prices:
        return None
    table = policy.price_table

    def price(flavor: str | None, gpu_hours: float, cpu_hours: float) -> float:
        return table.cost(flavor, gpu_hours * HOUR, cpu_hours * HOUR)

    return price


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One row of a report: a group (``tenant`` and ``key``) in one period (``period_start``
    None: the whole window), with what it held there and what was lost to preemption and to
    node failures (GPU-hours of attempts that ended so)."""

    tenant: str | None
    key: str | None
    period_start: float | None
    gpu_hours: float
    cpu_hours: float
    attempts: int
    jobs: int
    preempted_gpu_hours: float
    node_lost_gpu_hours: float
    cost: float | None = None


@dataclass(frozen=True, slots=True)
class UsageReport:
    """Usage within ``[since, until)`` by ``by`` (and ``granularity``), as of ``now``."""

    by: UsageGroup
    since: float
    until: float
    now: float
    granularity: Granularity | None
    rows: tuple[UsageRow, ...]


def parse_group(value: str) -> UsageGroup:
    """``--by``'s value, or an error naming the field and the choices."""
    try:
        return UsageGroup(value.strip().lower())
    except ValueError:
        choices = ", ".join(g.value for g in UsageGroup)
        raise invalid("by", f"unknown grouping {value!r}: use one of {choices}") from None


def parse_granularity(value: str | None) -> Granularity | None:
    """``--granularity``'s value (None: the whole window), or an error naming the field."""
    if value is None or not value.strip():
        return None
    try:
        return Granularity(value.strip().lower())
    except ValueError:
        choices = ", ".join(g.value for g in Granularity)
        raise invalid(
            "granularity", f"unknown granularity {value!r}: use one of {choices}"
        ) from None


_UNITS = {"s": 1.0, "m": 60.0, "h": HOUR, "d": 24 * HOUR, "w": 7 * 24 * HOUR}


def parse_time(value: str, *, field: str, now: float) -> float:
    """A point in time: a duration back from ``now`` (``30d``, ``12h``, ``2w``, ``90m``), an ISO
    date or date-time (UTC unless it says otherwise), or Unix seconds; else an error naming
    ``field``."""
    text = value.strip()
    if not text:
        raise invalid(field, "empty: give a duration back from now (30d) or a date (2026-11-01)")
    unit = _UNITS.get(text[-1].lower())
    if unit is not None and text[:-1].replace(".", "", 1).isdigit():
        return _in_range(now - float(text[:-1]) * unit, field, value)
    try:
        return _in_range(float(text), field, value)
    except ValueError:
        pass
    from datetime import UTC, datetime

    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise invalid(
            field,
            f"{value!r} is neither a duration back from now (30d, 12h, 2w) nor a date "
            "(2026-11-01 or 2026-11-01T08:00)",
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return _in_range(parsed.timestamp(), field, value)


LAST_TIME = 253_402_300_799.0  # 9999-12-31 23:59:59 UTC


def _in_range(at: float, field: str, value: str) -> float:
    """``at`` if it is a time between 1970 and the year 9999; else an error naming ``field``."""
    if not 0.0 <= at <= LAST_TIME:  # also NaN
        raise invalid(field, f"{value!r} is not a time between 1970 and the year 9999")
    return at


def periods(
    since: float, until: float, granularity: Granularity | None
) -> list[tuple[float, float]]:
    """The window cut at UTC day, ISO week (Monday) or month boundaries; each period clipped to
    the window. None: the whole window as one."""
    if granularity is None:
        return [(since, until)]
    start = _period_start(since, granularity)
    cuts: list[tuple[float, float]] = []
    while start < until:
        end = _next_period(start, granularity)
        cuts.append((max(start, since), min(end, until)))
        if len(cuts) > MAX_PERIODS:
            raise invalid(
                "granularity",
                f"the window holds more than {MAX_PERIODS} {granularity.value}s: use a coarser "
                "granularity or a shorter window",
            )
        start = end
    return cuts


def _period_start(at: float, granularity: Granularity) -> float:
    t = time.gmtime(at)
    midnight = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0))
    if granularity is Granularity.DAY:
        return float(midnight)
    if granularity is Granularity.WEEK:
        return float(midnight - t.tm_wday * 86400)
    return float(calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)))


def _next_period(start: float, granularity: Granularity) -> float:
    if granularity is Granularity.DAY:
        return start + 86400.0
    if granularity is Granularity.WEEK:
        return start + 7 * 86400.0
    t = time.gmtime(start)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


_KEY_COLUMNS = {
    UsageGroup.TENANT: None,
    UsageGroup.USER: UsageRecord.member,
    UsageGroup.QUEUE: UsageRecord.queue,
    UsageGroup.FLAVOR: UsageRecord.flavor,
    UsageGroup.JOB: UsageRecord.job_id,
}


def usage_report(
    session: Session,
    principal: Principal,
    *,
    by: UsageGroup,
    since: float,
    until: float,
    now: float,
    granularity: Granularity | None = None,
    price: Pricing | None = None,
) -> UsageReport:
    """Usage within ``[since, until)`` grouped ``by`` (per period with ``granularity``), of
    what ``principal`` may see: an admin every tenant's, anyone else their own tenant's.

    Records are clipped to the window and to each period; an open one counts up to ``now``
    (``held_end``: the rule budgets follow too).
    One aggregating query (the periods joined as a small derived table), so a report over a
    million records stays in the database.
    """
    if until <= since:
        raise invalid("until", "must be after since (the window ends before it starts)")
    if not principal.is_admin and principal.tenant is None:
        return UsageReport(by, since, until, now, granularity, ())
    cuts = periods(since, until, granularity)
    bucket = union_all(
        *(select(literal(lo, Float).label("lo"), literal(hi, Float).label("hi")) for lo, hi in cuts)
    ).subquery("periods")
    # SQLite would read a wide window through an index, row by row (50 s for a million rows
    # where a scan takes a few): a window of more than a week scans the table there.
    sqlite = session.get_bind().dialect.name == "sqlite"
    scan = sqlite and now - since > WIDE_WINDOW_S
    started: ColumnElement[float] = (
        UsageRecord.started_at + 0.0 if scan else UsageRecord.started_at.expression
    )
    held = held_seconds(bucket.c.lo, bucket.c.hi, now)
    gpu_s = UsageRecord.gpus * held
    key = _KEY_COLUMNS[by]
    tenant_col = None if by is UsageGroup.FLAVOR else UsageRecord.tenant
    groups: list[Any] = [c for c in (tenant_col, key) if c is not None]
    per_flavor = price is not None and by is not UsageGroup.FLAVOR
    if per_flavor:
        groups.append(UsageRecord.flavor)
    if granularity is not None:
        groups.append(bucket.c.lo)

    def lost(outcome: AttemptOutcome) -> ColumnElement[Any]:
        return func.sum(case((UsageRecord.outcome == outcome.value, gpu_s), else_=0.0))

    query = (
        select(
            *groups,
            func.sum(gpu_s),
            func.sum(UsageRecord.cpu_millis * held),
            func.count(),
            # A job's first record here: the one whose previous record ended before the period.
            func.sum(
                case(
                    (
                        or_(
                            UsageRecord.previous_ended_at.is_(None),
                            UsageRecord.previous_ended_at <= bucket.c.lo,
                        ),
                        1,
                    ),
                    else_=0,
                )
            ),
            lost(AttemptOutcome.PREEMPTED),
            lost(AttemptOutcome.NODE_LOST),
        )
        .select_from(UsageRecord)
        .join(bucket, holds_within(bucket.c.lo, bucket.c.hi, now))
        .where(overlapping(since, until, started))
        .group_by(*groups)
    )
    if not principal.is_admin:
        query = query.where(UsageRecord.tenant == principal.tenant)
    folded: dict[tuple[str | None, str | None, float | None], UsageRow] = {}
    for result in session.execute(query):
        values = tuple(result)
        at = 0
        tenant = values[at] if tenant_col is not None else None
        at += tenant_col is not None
        name = tenant if key is None else values[at]
        at += key is not None
        flavor = values[at] if per_flavor else (name if by is UsageGroup.FLAVOR else None)
        at += per_flavor
        period = float(values[at]) if granularity is not None else None
        at += granularity is not None
        gpu_sum, cpu_sum, attempts, jobs, preempted, node_lost = values[at:]
        gpu_h = float(gpu_sum or 0.0) / HOUR
        cpu_h = float(cpu_sum or 0.0) / 1000 / HOUR
        row = UsageRow(
            tenant=tenant,
            key=name,
            period_start=period,
            gpu_hours=gpu_h,
            cpu_hours=cpu_h,
            attempts=int(attempts),
            jobs=int(jobs or 0),
            preempted_gpu_hours=float(preempted or 0.0) / HOUR,
            node_lost_gpu_hours=float(node_lost or 0.0) / HOUR,
            cost=None if price is None else price(flavor, gpu_h, cpu_h),
        )
        slot = (tenant, name, period)
        folded[slot] = row if slot not in folded else _add(folded[slot], row)
    rows = sorted(
        folded.values(),
        key=lambda r: (r.period_start or 0.0, -r.gpu_hours, r.tenant or "", r.key or ""),
    )
    return UsageReport(by, since, until, now, granularity, tuple(rows))


def _add(a: UsageRow, b: UsageRow) -> UsageRow:
    """Two flavors' parts of one row (priced apart) as one."""
    return replace(
        a,
        gpu_hours=a.gpu_hours + b.gpu_hours,
        cpu_hours=a.cpu_hours + b.cpu_hours,
        attempts=a.attempts + b.attempts,
        jobs=a.jobs + b.jobs,
        preempted_gpu_hours=a.preempted_gpu_hours + b.preempted_gpu_hours,
        node_lost_gpu_hours=a.node_lost_gpu_hours + b.node_lost_gpu_hours,
        cost=None if a.cost is None or b.cost is None else a.cost + b.cost,
    )
