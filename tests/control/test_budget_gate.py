"""Budgets hold, release and stop jobs at the loop's ``now`` (fake executor, manual clock).

Usage is what the usage records say (written here as the accounting would have), so each
case knows its figures exactly: the fake nodes have 2 GPUs each; the manual clock starts at
2023-11-14T22:13:20Z, so the month's period ends at 2023-12-01T00:00:00Z (``MONTH_END``).
"""

from __future__ import annotations

from typing import Any

import pytest
from loop_support import cancel, events, get, state
from sqlalchemy import select

from kiban.platform import Platform
from kiban.services import budgets
from kiban.services.auth import Principal
from kiban.services.errors import Forbidden, InvalidInput, NotFound
from kiban.services.policy import apply_policy
from kiban.store.models import Event, UsageRecord
from kiban.testing import ManualClock, manifest
from kiban.testing.platform_jobs import ADMIN, submit_to_platform

MONTH_START = 1698796800.0  # 2023-11-01T00:00:00Z
MONTH_END = 1701388800.0  # 2023-12-01T00:00:00Z
MEMBER = Principal(name="alice", tenant="vision", is_admin=False)


def policy(*budget_entries: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "queues": [
            {"name": "train", "tenant": "vision"},
            {"name": "infer", "tenant": "vision"},
            {"name": "other", "tenant": "speech"},
        ],
        "budgets": list(budget_entries),
        **more,
    }


def set_policy(platform: Platform, document: dict[str, Any]) -> None:
    with platform.sessions() as session:
        apply_policy(session, document, actor="admin", at=platform.clock.now())
        session.commit()


def used(
    platform: Platform,
    gpu_hours: float,
    *,
    queue: str = "train",
    tenant: str = "vision",
    start: float | None = None,
) -> None:
    """A closed usage record of 2 GPUs holding ``gpu_hours`` GPU-hours, ending now."""
    now = platform.clock.now()
    seconds = gpu_hours * 3600 / 2
    with platform.sessions() as session:
        count = len(list(session.scalars(select(UsageRecord.id))))
        session.add(
            UsageRecord(
                kind="job",
                job_id=f"past-{count}",
                attempt=1,
                tenant=tenant,
                member="alice",
                queue=queue,
                flavor="default",
                gpus=2,
                cpu_millis=2000,
                memory=0,
                started_at=start if start is not None else now - seconds,
                ended_at=now,
                gpu_seconds=2 * seconds,
                outcome="succeeded",
            )
        )
        session.commit()


def run_pass(platform: Platform, clock: ManualClock, seconds: float = 1) -> None:
    clock.advance(seconds)
    platform.loop.run_once()


def tenant_events(platform: Platform, reason: str) -> list[str]:
    with platform.sessions() as session:
        query = select(Event).where(Event.object_kind == "Tenant", Event.reason == reason)
        return [e.message for e in session.scalars(query.order_by(Event.id))]


@pytest.fixture
def near_month_end(clock: ManualClock) -> ManualClock:
    """The clock an hour before the month's period ends."""
    clock.advance(MONTH_END - 3600 - clock.now())
    return clock


def test_a_hold_budget_used_up_keeps_new_jobs_pending_until_the_period_rolls_over(
    platform: Platform, near_month_end: ManualClock
) -> None:
    clock = near_month_end
    set_policy(platform, policy({"tenant": "vision", "gpuHours": 10, "action": "hold"}))
    used(platform, 10)
    held = submit_to_platform(platform, manifest("held", queue="train"))
    other = submit_to_platform(platform, manifest("other", queue="other"))
    run_pass(platform, clock)

    job = get(platform, held)
    assert (job.state, job.gate, job.reason_code) == ("Pending", "Budget", "BudgetExhausted")
    assert job.reason_details is not None
    assert job.reason_details["used"] == pytest.approx(10)
    assert job.reason_details["limit"] == 10
    assert job.reason_details["periodEnd"] == "2023-12-01T00:00:00Z"
    assert "10.0 GPU-hours of 10.0" in (job.reason_message or "")
    assert state(platform, other) == "Running"  # another tenant is not held

    run_pass(platform, clock, 3598)  # one second before the period ends: still held
    assert get(platform, held).gate == "Budget"
    run_pass(platform, clock, 2)  # the new month: nothing used in it
    assert state(platform, held) == "Running"
    assert get(platform, held).reason_code is None


def test_thresholds_and_the_limit_are_each_an_event_once_per_period(
    platform: Platform, near_month_end: ManualClock
) -> None:
    clock = near_month_end
    set_policy(platform, policy({"tenant": "vision", "gpuHours": 10, "warnAt": [0.5, 0.9]}))
    used(platform, 6)
    run_pass(platform, clock)
    run_pass(platform, clock)
    assert len(tenant_events(platform, "BudgetThreshold")) == 1
    assert "passed 50%" in tenant_events(platform, "BudgetThreshold")[0]
    used(platform, 4)
    run_pass(platform, clock)
    run_pass(platform, clock)
    assert len(tenant_events(platform, "BudgetThreshold")) == 2
    assert len(tenant_events(platform, "BudgetExhausted")) == 1
    ratios = platform.loop.gates.budgets
    assert ratios is not None and ratios.ratios.get("vision") == pytest.approx(1.0)


def test_a_running_job_continues_under_hold_and_is_stopped_under_stop(
    platform: Platform, near_month_end: ManualClock
) -> None:
    clock = near_month_end
    set_policy(platform, policy({"tenant": "vision", "gpuHours": 10, "action": "hold"}))
    running = submit_to_platform(platform, manifest("running", queue="train"))
    run_pass(platform, clock)
    assert state(platform, running) == "Running"
    used(platform, 11)
    run_pass(platform, clock)
    assert state(platform, running) == "Running"  # hold: running ones continue

    set_policy(platform, policy({"tenant": "vision", "gpuHours": 10, "action": "stop"}))
    run_pass(platform, clock)
    run_pass(platform, clock)
    assert state(platform, running) in ("Stopping", "Cancelled")
    stopped = [
        message for reason, message in events(platform, running) if reason == "BudgetStopped"
    ]
    assert stopped == ["budget vision is used up and its action is stop"]


def test_a_job_whose_max_runtime_would_cross_the_budget_is_held_with_the_figures(
    platform: Platform, near_month_end: ManualClock
) -> None:
    clock = near_month_end
    set_policy(platform, policy({"tenant": "vision", "gpuHours": 10, "action": "hold"}))
    used(platform, 8)
    long = submit_to_platform(platform, manifest("long", gpu=2, queue="train", maxRuntime="2h"))
    short = submit_to_platform(platform, manifest("short", gpu=2, queue="train", maxRuntime="30m"))
    run_pass(platform, clock)

    job = get(platform, long)
    assert (job.state, job.reason_code) == ("Pending", "BudgetExhausted")
    assert job.reason_details is not None
    assert job.reason_details["job"] == pytest.approx(4)  # 2 GPUs x 2 h
    assert job.reason_details["used"] == pytest.approx(8)
    assert "maxRuntime may use 4.0 GPU-hours, but only 2.0 GPU-hours of 10.0" in (
        job.reason_message or ""
    )
    assert state(platform, short) == "Running"  # 1 GPU-hour fits in the 2 left


def test_an_extension_releases_held_jobs_and_is_recorded(
    platform: Platform, near_month_end: ManualClock
) -> None:
    clock = near_month_end
    set_policy(platform, policy({"tenant": "vision", "gpuHours": 10}))
    used(platform, 10)
    held = submit_to_platform(platform, manifest("held", queue="train"))
    run_pass(platform, clock)
    assert get(platform, held).gate == "Budget"

    with platform.sessions() as session:
        current = platform.loop.policies.get(session)
        with pytest.raises(Forbidden):
            budgets.grant_extension(
                session,
                MEMBER,
                current,
                tenant="vision",
                queue=None,
                gpu_hours=5,
                cost=None,
                until=None,
                now=clock.now(),
            )
        row = budgets.grant_extension(
            session,
            ADMIN,
            current,
            tenant="vision",
            queue=None,
            gpu_hours=5,
            cost=None,
            until=None,
            now=clock.now(),
        )
        session.commit()
        assert (row.budget, row.amount, row.until, row.granted_by) == (
            "vision",
            5.0,
            MONTH_END,
            ADMIN.name,
        )
    run_pass(platform, clock)
    assert state(platform, held) == "Running"
    with platform.sessions() as session:
        (standing,) = budgets.visible_standings(session, MEMBER, current, clock.now())
        assert (standing.limit, standing.extended) == (15.0, 5.0)
        other = Principal(name="bob", tenant="speech", is_admin=False)
        assert budgets.visible_standings(session, other, current, clock.now()) == []


@pytest.mark.parametrize(
    ("tenant", "queue", "gpu_hours", "cost", "until", "error", "field"),
    [
        ("speech", None, 5, None, None, NotFound, None),
        ("vision", "train", 5, None, None, NotFound, None),
        ("vision", None, None, 5, None, InvalidInput, "cost"),
        ("vision", None, -1, None, None, InvalidInput, "gpuHours"),
        ("vision", None, 5, None, 1.0, InvalidInput, "until"),
        ("vision", None, None, None, None, InvalidInput, "gpuHours"),
    ],
)
def test_a_bad_extension_is_refused_naming_the_field(
    platform: Platform,
    tenant: str,
    queue: str | None,
    gpu_hours: float | None,
    cost: float | None,
    until: float | None,
    error: type[Exception],
    field: str | None,
) -> None:
    set_policy(platform, policy({"tenant": "vision", "gpuHours": 10}))
    with platform.sessions() as session:
        current = platform.loop.policies.get(session)
        with pytest.raises(error) as refused:
            budgets.grant_extension(
                session,
                ADMIN,
                current,
                tenant=tenant,
                queue=queue,
                gpu_hours=gpu_hours,
                cost=cost,
                until=until,
                now=platform.clock.now(),
            )
    if field is not None:
        assert isinstance(refused.value, InvalidInput)
        assert [p.field for p in refused.value.problems] == [field]


def test_a_warn_budget_only_warns_and_a_removed_budget_releases_its_jobs(
    platform: Platform, near_month_end: ManualClock
) -> None:
    clock = near_month_end
    set_policy(platform, policy({"tenant": "vision", "gpuHours": 10, "action": "warn"}))
    used(platform, 12)
    warned = submit_to_platform(platform, manifest("warned", queue="train"))
    run_pass(platform, clock)
    assert state(platform, warned) == "Running"
    assert tenant_events(platform, "BudgetExhausted")

    set_policy(platform, policy({"tenant": "vision", "queue": "infer", "gpuHours": 1}))
    used(platform, 2, queue="infer")
    held = submit_to_platform(platform, manifest("held", queue="infer"))
    run_pass(platform, clock)
    run_pass(platform, clock)
    assert get(platform, held).gate == "Budget"
    set_policy(platform, policy())
    run_pass(platform, clock)
    run_pass(platform, clock)
    assert state(platform, held) == "Running"


def test_a_cost_budget_prices_usage_per_flavor(
    platform: Platform, near_month_end: ManualClock
) -> None:
    clock = near_month_end
    document = policy(
        {"tenant": "vision", "cost": 100},
        prices=[{"flavor": "default", "gpuHour": 2.5, "cpuHour": 0.5}],
    )
    set_policy(platform, document)
    used(platform, 30)  # 15 h of 2 GPUs and 2 CPUs: 30 GPU-hours at 2.5, 30 CPU-hours at 0.5
    with platform.sessions() as session:
        current = platform.loop.policies.get(session)
        (standing,) = budgets.standings(session, current, clock.now())
    assert standing.used == pytest.approx(90)
    used(platform, 8)  # 8 GPU-hours and 8 CPU-hours more: 24 -> 114
    held = submit_to_platform(platform, manifest("held", queue="train"))
    run_pass(platform, clock)
    job = get(platform, held)
    assert job.reason_code == "BudgetExhausted"
    assert job.reason_details is not None and job.reason_details["used"] == pytest.approx(114)


def test_a_queue_allocation_applies_until_its_end_at_the_loops_now(
    platform: Platform, clock: ManualClock
) -> None:
    """Quota 2 GPUs, 4 while the allocation holds (through 2023-11-30, UTC): a 4-GPU job
    starts while it holds; after it, the same job waits on the queue's own quota."""
    allocation = {"quota": {"gpu": 4}, "until": "2023-11-30"}
    train = {"name": "train", "tenant": "vision", "quota": {"gpu": 2}, "allocation": allocation}
    set_policy(platform, {"queues": [train]})
    clock.advance(MONTH_END - 2 - clock.now())  # 2023-11-30T23:59:58Z
    first = submit_to_platform(platform, manifest("first", replicas=2, gpu=2, queue="train"))
    run_pass(platform, clock)
    assert state(platform, first) == "Running"
    cancel(platform, first)
    run_pass(platform, clock, 2)  # 2023-12-01T00:00:01Z: the queue's own quota again
    second = submit_to_platform(platform, manifest("second", replicas=2, gpu=2, queue="train"))
    run_pass(platform, clock)
    run_pass(platform, clock)
    assert state(platform, first) == "Cancelled"
    job = get(platform, second)
    assert job.state == "Pending"
    assert job.reason_code == "Unschedulable", job.reason_message
    assert "queue train can never hold more than 2" in (job.reason_message or "")


def test_with_no_budget_declared_the_gate_reads_nothing_after_its_first_pass(
    platform: Platform, clock: ManualClock
) -> None:
    """The first pass lets through any job a removed budget held; then, while no budget is
    declared, the gate sends no statement to the store."""
    from sqlalchemy import event

    gate = platform.loop.gates.budgets
    assert gate is not None
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    with platform.sessions() as session:
        gate(session, clock.now())  # the policy read, and the release of held jobs
        session.commit()
        event.listen(platform.engine, "before_cursor_execute", count)
        try:
            for _ in range(3):
                assert gate(session, clock.now()) is False
        finally:
            event.remove(platform.engine, "before_cursor_execute", count)
    assert statements == []


def test_the_budget_metric_is_on_metrics(platform: Platform, near_month_end: ManualClock) -> None:
    from kiban.api.routers.metrics import cluster_metrics

    set_policy(platform, policy({"tenant": "vision", "queue": "train", "gpuHours": 8}))
    used(platform, 2)
    run_pass(platform, near_month_end)
    text = cluster_metrics(platform).render().decode()
    assert 'kiban_budget_used_ratio{tenant="vision",queue="train"} 0.25' in text
