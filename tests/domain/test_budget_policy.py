"""Prices, budgets and time-bounded queue allocations in the policy: what is accepted, what
is refused (naming the field), and the allocation's fallback after ``until``."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.budgets import (
    BudgetAction,
    BudgetUnit,
    month_window,
    period_window,
    start_of,
)
from kiban.domain.cluster import parse_policy
from kiban.domain.errors import SpecError
from kiban.services.quota_ledger import queue_view
from kiban.store.models import Queue

FLAVORS = [{"name": "h100", "nodeLabels": {"gpu": "h100"}}]
QUEUES = [
    {"name": "train", "tenant": "vision", "quota": {"h100": {"gpu": 4}}},
    {"name": "asr", "tenant": "speech"},
]


def doc(**parts: Any) -> dict[str, Any]:
    return {"flavors": FLAVORS, "queues": QUEUES, **parts}


def test_prices_and_budgets_as_the_issue_writes_them() -> None:
    policy = parse_policy(
        doc(
            prices=[{"flavor": "h100", "gpuHour": 2.5, "cpuHour": 0.02}],
            budgets=[
                {
                    "tenant": "vision",
                    "period": "month",
                    "gpuHours": 500,
                    "warnAt": [0.8, 0.95],
                    "action": "hold",
                },
                {
                    "tenant": "speech",
                    "queue": "asr",
                    "cost": 1200,
                    "action": "stop",
                    "period": {"start": "2026-12-01", "end": "2026-12-31"},
                },
            ],
        )
    )
    hold, stop = policy.budgets
    assert (hold.unit, hold.amount, hold.action, hold.key) == (
        BudgetUnit.GPU_HOURS,
        500,
        BudgetAction.HOLD,
        "vision",
    )
    assert (stop.unit, stop.amount, stop.key) == (BudgetUnit.COST, 1200, "speech/asr")
    assert policy.price_table.cost("h100", 3600 * 4, 3600 * 10) == pytest.approx(10.2)
    december = start_of(__import__("datetime").date(2026, 12, 15))
    assert period_window(stop, december) == (1796083200.0, 1798761600.0)  # Dec 1 .. Jan 1
    assert period_window(stop, 1798761600.0) is None  # over: the budget does not apply


@pytest.mark.parametrize(
    ("parts", "field", "message"),
    [
        (
            {"prices": [{"flavor": "h100", "gpuHour": -1}]},
            "prices[0].gpuHour",
            "greater than or equal to 0",
        ),
        (
            {"prices": [{"flavor": "a100", "gpuHour": 1}]},
            "prices[0].flavor",
            "unknown flavor 'a100'",
        ),
        ({"budgets": [{"tenant": "vision", "dollars": 5}]}, "budgets[0]", "unknown key 'dollars'"),
        ({"budgets": [{"tenant": "vision"}]}, "budgets[0]", "gpuHours: N or cost: N"),
        ({"budgets": [{"tenant": "vision", "gpuHours": 1, "cost": 1}]}, "budgets[0]", "not both"),
        (
            {"budgets": [{"tenant": "vision", "gpuHours": -5}]},
            "budgets[0].gpuHours",
            "greater than 0",
        ),
        (
            {"budgets": [{"tenant": "vision", "gpuHours": 5, "period": "week"}]},
            "budgets[0].period",
            "'week' is not a period",
        ),
        (
            {
                "budgets": [
                    {
                        "tenant": "vision",
                        "gpuHours": 5,
                        "period": {"start": "2026-12-31", "end": "2026-12-01"},
                    }
                ]
            },
            "budgets[0].period",
            "ends (2026-12-01) before it starts (2026-12-31)",
        ),
        (
            {"budgets": [{"tenant": "vision", "gpuHours": 5, "warnAt": [0.8, 1.5]}]},
            "budgets[0].warnAt",
            "1.5 is not a fraction of the budget in (0, 1]",
        ),
        (
            {"budgets": [{"tenant": "vision", "gpuHours": 5, "warnAt": [0]}]},
            "budgets[0].warnAt",
            "0.0 is not a fraction",
        ),
        (
            {"budgets": [{"tenant": "vision", "gpuHours": 5, "action": "kill"}]},
            "budgets[0].action",
            "'warn', 'hold' or 'stop'",
        ),
        (
            {"budgets": [{"tenant": "nlp", "gpuHours": 5}]},
            "budgets[0].tenant",
            "unknown tenant 'nlp'",
        ),
        (
            {"budgets": [{"tenant": "vision", "queue": "nope", "gpuHours": 5}]},
            "budgets[0].queue",
            "unknown queue 'nope'",
        ),
        (
            {"budgets": [{"tenant": "vision", "queue": "asr", "gpuHours": 5}]},
            "budgets[0].queue",
            "queue asr belongs to tenant speech",
        ),
        ({"budgets": [{"tenant": "vision", "cost": 5}]}, "budgets[0].cost", "needs prices"),
        (
            {"budgets": [{"tenant": "vision", "gpuHours": 5}, {"tenant": "vision", "gpuHours": 6}]},
            "budgets[1].tenant",
            "declared twice",
        ),
    ],
)
def test_bad_prices_and_budgets_are_refused_naming_the_field(
    parts: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy(doc(**parts))
    problems = caught.value.problems
    assert [p.field for p in problems] == [field], problems
    assert message in problems[0].message, problems[0]


@pytest.mark.parametrize(
    ("allocation", "field", "message"),
    [
        (
            {"quota": {"h100": {"gpu": 16}}},
            "queues[0].allocation.until",
            "required field is missing",
        ),
        ({"until": "someday"}, "queues[0].allocation.until", "not a date or date-time"),
        (
            {"until": "2026-12-31", "quota": {"a100": {"gpu": 1}}},
            "queues[0].allocation.quota.a100",
            "unknown flavor 'a100'",
        ),
        (
            {"until": "2026-12-31", "fairShareWeight": 0},
            "queues[0].allocation.fairShareWeight",
            "greater than 0",
        ),
    ],
)
def test_a_bad_allocation_is_refused_naming_the_field(
    allocation: dict[str, Any], field: str, message: str
) -> None:
    queues = [{**QUEUES[0], "allocation": allocation}, QUEUES[1]]
    with pytest.raises(SpecError) as caught:
        parse_policy({"flavors": FLAVORS, "queues": queues})
    problems = caught.value.problems
    assert [p.field for p in problems] == [field], problems
    assert message in problems[0].message, problems[0]


def test_an_allocation_holds_through_its_until_day_then_the_queue_falls_back() -> None:
    allocation = {"quota": {"h100": {"gpu": 16}}, "fairShareWeight": 4, "until": "2026-12-31"}
    policy = parse_policy(
        {"flavors": FLAVORS, "queues": [{**QUEUES[0], "allocation": allocation}, QUEUES[1]]}
    )
    row = Queue(
        name="train",
        tenant="vision",
        strategy="StrictFIFO",
        created_at=0.0,
        quota={"h100": {"gpu": 4}},
        borrowing_limit={},
        lending_limit={},
        fair_share_weight=1.0,
    )
    last_second = 1798761600.0 - 1  # 2026-12-31T23:59:59Z
    during = queue_view(row, policy, now=last_second)
    after = queue_view(row, policy, now=last_second + 1)  # 2027-01-01T00:00:00Z
    assert (during.nominal, during.weight) == ({"h100": 16}, 4.0)
    assert (after.nominal, after.weight) == ({"h100": 4}, 1.0)
    assert queue_view(row, policy).nominal == {"h100": 4}  # no now: the queue's own


def test_the_month_period_is_the_calendar_month_in_utc() -> None:
    assert month_window(1_700_000_000.0) == (1698796800.0, 1701388800.0)  # Nov 2023
    assert month_window(1703980800.0 + 86399) == (1701388800.0, 1704067200.0)  # Dec 31 2023
