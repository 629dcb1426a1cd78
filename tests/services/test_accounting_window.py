"""GPU-seconds a tenant held in a window: closed records clipped to it, open ones up to now."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from kiban.domain.budgets import BudgetDecl, Prices
from kiban.services import budgets
from kiban.services.accounting import (
    HeldOnFlavor,
    UsageGroup,
    gpu_seconds_used,
    held_in_window,
    parse_granularity,
    parse_time,
    periods,
    usage_report,
)
from kiban.services.auth import Principal
from kiban.services.errors import InvalidInput
from kiban.store.db import make_engine, migrate, session_factory
from kiban.store.models_accounting import UsageRecord


@pytest.fixture
def session(db_url: str) -> Iterator[Session]:
    engine = make_engine(db_url)
    migrate(engine)
    with session_factory(engine)() as s:
        yield s
    engine.dispose()


def record(
    job: str,
    start: float,
    end: float | None,
    *,
    gpus: int = 1,
    tenant: str = "vision",
    queue: str = "train",
    flavor: str | None = None,
    cpu_millis: int = 1000,
) -> UsageRecord:
    return UsageRecord(
        kind="job",
        job_id=job,
        attempt=1,
        tenant=tenant,
        member="ana",
        queue=queue,
        flavor=flavor,
        gpus=gpus,
        cpu_millis=cpu_millis,
        memory=2**30,
        started_at=start,
        ended_at=end,
        gpu_seconds=None if end is None else gpus * (end - start),
        outcome=None if end is None else "succeeded",
    )


@pytest.mark.parametrize(
    ("since", "until", "now", "queue", "expected"),
    [
        # a: 2 GPUs 0..100; b: 1 GPU 50..150 (queue dev); c: 4 GPUs open since 120; other tenant
        (0, 1000, 200, None, 2 * 100 + 1 * 100 + 4 * 80),
        (60, 1000, 200, None, 2 * 40 + 1 * 90 + 4 * 80),  # clipped at the start
        (0, 130, 200, None, 2 * 100 + 1 * 80 + 4 * 10),  # clipped at the end
        (0, 1000, 130, None, 2 * 100 + 1 * 100 + 4 * 10),  # open one counted up to now only
        (0, 1000, 200, "dev", 1 * 100),
        (150, 160, 155, "dev", 0),  # b ended exactly at since
        (300, 400, 200, None, 0),  # a window after now
    ],
)
def test_gpu_seconds_used_clips_to_the_window(
    session: Session, since: float, until: float, now: float, queue: str | None, expected: float
) -> None:
    session.add_all(
        [
            record("a", 0, 100, gpus=2),
            record("b", 50, 150, queue="dev"),
            record("c", 120, None, gpus=4),
            record("x", 0, 1000, gpus=8, tenant="nlp"),
            record("cpu", 0, 1000, gpus=0),
        ]
    )
    session.commit()
    used = gpu_seconds_used(
        session, tenant="vision", since=since, until=until, now=now, queue=queue
    )
    assert used == pytest.approx(expected)


def stepped_back() -> list[UsageRecord]:
    """A clock stepped back: "late" closed at 300, after now (200); "early" opened at 250 and
    is still open."""
    return [
        record("a", 0, 100, gpus=2, flavor="h100", cpu_millis=4000),
        record("b", 50, 150, flavor="a100", cpu_millis=500),
        record("late", 180, 300, gpus=4, flavor="h100", cpu_millis=2000),
        record("early", 250, None, gpus=8, flavor="h100"),
        record("cpu", 0, 100, gpus=0, flavor="a100", cpu_millis=8000),
    ]


NOW = 200.0


def test_held_in_window_gives_gpu_and_cpu_seconds_per_flavor_and_closed_records_to_their_end(
    session: Session,
) -> None:
    """A closed record counts to its recorded end even past ``now`` (a clock stepped back); an
    open one started after ``now`` holds nothing yet."""
    session.add_all(stepped_back())
    session.commit()
    held = held_in_window(session, tenant="vision", since=60, until=1000, now=NOW)
    assert sorted(held, key=lambda h: h.flavor or "") == [
        HeldOnFlavor("a100", pytest.approx(1 * 90), pytest.approx(0.5 * 90 + 8 * 40)),
        HeldOnFlavor("h100", pytest.approx(2 * 40 + 4 * 120), pytest.approx(4 * 40 + 2 * 120)),
    ]


@pytest.mark.parametrize(
    ("since", "until"), [(0, 1000), (60, 1000), (0, 130), (190, 260), (150, 160), (300, 400)]
)
def test_budgets_and_the_usage_report_read_a_window_alike(
    session: Session, since: float, until: float
) -> None:
    """A budget's GPU-hours are the usage report's for the same window, a clock stepped back
    included: the window rule exists once (``accounting.held_end``)."""
    session.add_all(stepped_back())
    session.commit()
    decl = BudgetDecl.model_validate({"tenant": "vision", "gpuHours": 100})
    used = budgets.used_amount(session, decl, Prices({}, {}), since, until, NOW)
    admin = Principal(name="admin", tenant=None, is_admin=True)
    report = usage_report(session, admin, by=UsageGroup.TENANT, since=since, until=until, now=NOW)
    reported = sum(r.gpu_hours for r in report.rows)
    assert used == pytest.approx(reported)
    assert used * 3600 == pytest.approx(
        gpu_seconds_used(session, tenant="vision", since=since, until=until, now=NOW)
    )


def test_a_record_closed_after_now_counts_to_its_end_in_a_budget(session: Session) -> None:
    session.add(record("late", 180, 300, gpus=4))
    session.commit()
    decl = BudgetDecl.model_validate({"tenant": "vision", "gpuHours": 1})
    used = budgets.used_amount(session, decl, Prices({}, {}), 0, 1000, NOW)
    assert used == pytest.approx(4 * 120 / 3600)


NOV_1 = 1_793_491_200.0  # 2026-11-01 00:00 UTC, a Sunday


@pytest.mark.parametrize(
    ("since", "until", "granularity", "expected"),
    [
        (NOV_1 + 3600, NOV_1 + 86400 + 60, "day", [NOV_1 + 3600, NOV_1 + 86400]),
        # ISO weeks start on Monday: Sunday Nov 1 belongs to the week of Monday Oct 26.
        (NOV_1, NOV_1 + 8 * 86400, "week", [NOV_1, NOV_1 + 86400]),
        # Months are calendar months: November has 30 days, December 31.
        (NOV_1, NOV_1 + 61 * 86400 + 1, "month", [NOV_1, NOV_1 + 30 * 86400, NOV_1 + 61 * 86400]),
    ],
)
def test_periods_are_cut_at_utc_calendar_boundaries(
    since: float, until: float, granularity: str, expected: list[float]
) -> None:
    cuts = periods(since, until, parse_granularity(granularity))
    assert [lo for lo, _hi in cuts] == expected
    assert cuts[-1][1] == until
    assert all(hi == lo2 for (_lo, hi), (lo2, _hi2) in itertools.pairwise(cuts))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", NOV_1 - 30 * 86400),
        ("12h", NOV_1 - 12 * 3600),
        ("2w", NOV_1 - 14 * 86400),
        ("1.5h", NOV_1 - 5400),
        ("2026-10-01", NOV_1 - 31 * 86400),
        ("2026-10-31T12:00", NOV_1 - 12 * 3600),
        ("2026-10-31T12:00+09:00", NOV_1 - 21 * 3600),
        ("1793491200", NOV_1),
    ],
)
def test_times_read_as_durations_back_dates_or_seconds(text: str, expected: float) -> None:
    assert parse_time(text, field="since", now=NOV_1) == expected


@pytest.mark.parametrize(
    "text", ["", "yesterday", "3x", "-2d", "2026-13-01", "nan", "inf", "-5", "99999999d"]
)
def test_a_time_that_cannot_be_read_names_the_field(text: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_time(text, field="until", now=NOV_1)
    assert [p.field for p in caught.value.problems] == ["until"]
