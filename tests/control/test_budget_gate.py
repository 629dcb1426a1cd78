"""Budgets hold, release and stop jobs at the loop's ``now`` (fake executor, manual clock).

Usage is what the usage records say (written here as the accounting would have), so each
case knows its figures exactly: the fake nodes have 2 GPUs each; the manual clock starts at
2023-11-14T22:13:20Z, so the month's period ends at 2023-12-01T00:00:00Z (``MONTH_END``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from loop_support import cancel, events, get, state
from sqlalchemy import select

from kiban.domain.budgets import Standing
from kiban.domain.cluster import ClusterPolicy
from kiban.platform import Platform
from kiban.services import budgets
from kiban.services.auth import Principal
from kiban.services.errors import Forbidden, InvalidInput, NotFound
from kiban.services.policy import apply_policy
from kiban.store.models import Event, Job
from kiban.store.models_accounting import BudgetExtension, UsageRecord
from kiban.testing import ManualClock, manifest, submit
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


@dataclass
class Scene:
    """A platform and its clock, with the steps the cases share: declare budgets, record
    usage, submit, run passes, grant extensions (each step in its own committed session)."""

    platform: Platform
    clock: ManualClock

    def declare(self, *budget_entries: dict[str, Any], **more: Any) -> Scene:
        set_policy(self.platform, policy(*budget_entries, **more))
        return self

    def used(self, gpu_hours: float, **where: Any) -> Scene:
        used(self.platform, gpu_hours, **where)
        return self

    def submit(self, name: str, queue: str = "train", **spec: Any) -> str:
        return submit_to_platform(self.platform, manifest(name, queue=queue, **spec))

    def run(self, seconds: float = 1, times: int = 1) -> Scene:
        for _ in range(times):
            run_pass(self.platform, self.clock, seconds)
        return self

    def current_policy(self) -> ClusterPolicy:
        with self.platform.sessions() as session:
            return self.platform.loop.policies.get(session)

    def standings(self, principal: Principal | None = None) -> list[Standing]:
        """The budgets as they stand now: all of them, or those ``principal`` may see."""
        current = self.current_policy()
        with self.platform.sessions() as session:
            if principal is None:
                return budgets.standings(session, current, self.clock.now())
            return budgets.visible_standings(session, principal, current, self.clock.now())

    def extend(self, principal: Principal = ADMIN, **asked: Any) -> tuple[Any, ...]:
        """Grant an extension (vision's budget, 5 GPU-hours to the period's end unless
        ``asked`` says otherwise), committed: the budget, amount, end and grantor recorded."""
        given: dict[str, Any] = {
            "tenant": "vision",
            "queue": None,
            "gpu_hours": 5,
            "cost": None,
            "until": None,
        }
        current = self.current_policy()
        with self.platform.sessions() as session:
            row = budgets.grant_extension(
                session, principal, current, now=self.clock.now(), **(given | asked)
            )
            session.commit()
            return (row.budget, row.amount, row.until, row.granted_by)


@pytest.fixture
def scene(platform: Platform, near_month_end: ManualClock) -> Scene:
    """The platform an hour before the month's period ends."""
    return Scene(platform, near_month_end)


def test_a_hold_budget_used_up_keeps_new_jobs_pending_until_the_period_rolls_over(
    platform: Platform, scene: Scene
) -> None:
    scene.declare({"tenant": "vision", "gpuHours": 10, "action": "hold"}).used(10)
    held = scene.submit("held")
    other = scene.submit("other", queue="other")
    scene.run()

    job = get(platform, held)
    assert (job.state, job.gate, job.reason_code) == ("Pending", "Budget", "BudgetExhausted")
    assert job.reason_details is not None
    assert job.reason_details["used"] == pytest.approx(10)
    assert job.reason_details["limit"] == 10
    assert job.reason_details["periodEnd"] == "2023-12-01T00:00:00Z"
    assert "10.0 GPU-hours of 10.0" in (job.reason_message or "")
    assert state(platform, other) == "Running"  # another tenant is not held

    scene.run(3598)  # one second before the period ends: still held
    assert get(platform, held).gate == "Budget"
    scene.run(2)  # the new month: nothing used in it
    assert state(platform, held) == "Running"
    assert get(platform, held).reason_code is None


def test_thresholds_and_the_limit_are_each_an_event_once_per_period(
    platform: Platform, scene: Scene
) -> None:
    scene.declare({"tenant": "vision", "gpuHours": 10, "warnAt": [0.5, 0.9]})
    scene.used(6).run(times=2)
    assert len(tenant_events(platform, "BudgetThreshold")) == 1
    assert "passed 50%" in tenant_events(platform, "BudgetThreshold")[0]
    scene.used(4).run(times=2)
    assert len(tenant_events(platform, "BudgetThreshold")) == 2
    assert len(tenant_events(platform, "BudgetExhausted")) == 1
    ratios = platform.loop.gates.budgets
    assert ratios is not None and ratios.ratios.get("vision") == pytest.approx(1.0)


def test_a_running_job_continues_under_hold_and_is_stopped_under_stop(
    platform: Platform, scene: Scene
) -> None:
    scene.declare({"tenant": "vision", "gpuHours": 10, "action": "hold"})
    running = scene.submit("running")
    scene.run()
    assert state(platform, running) == "Running"
    scene.used(11).run()
    assert state(platform, running) == "Running"  # hold: running ones continue

    scene.declare({"tenant": "vision", "gpuHours": 10, "action": "stop"}).run(times=2)
    assert state(platform, running) in ("Stopping", "Cancelled")
    stopped = [
        message for reason, message in events(platform, running) if reason == "BudgetStopped"
    ]
    assert stopped == ["budget vision is used up and its action is stop"]


def test_a_job_whose_max_runtime_would_cross_the_budget_is_held_with_the_figures(
    platform: Platform, scene: Scene
) -> None:
    scene.declare({"tenant": "vision", "gpuHours": 10, "action": "hold"}).used(8)
    long = scene.submit("long", gpu=2, maxRuntime="2h")
    short = scene.submit("short", gpu=2, maxRuntime="30m")
    scene.run()

    job = get(platform, long)
    assert (job.state, job.reason_code) == ("Pending", "BudgetExhausted")
    assert job.reason_details is not None
    assert job.reason_details["job"] == pytest.approx(4)  # 2 GPUs x 2 h
    assert job.reason_details["used"] == pytest.approx(8)
    assert "maxRuntime may use 4.0 GPU-hours, but only 2.0 GPU-hours of 10.0" in (
        job.reason_message or ""
    )
    assert state(platform, short) == "Running"  # 1 GPU-hour fits in the 2 left


def test_an_extension_releases_held_jobs_and_is_recorded(platform: Platform, scene: Scene) -> None:
    scene.declare({"tenant": "vision", "gpuHours": 10}).used(10)
    held = scene.submit("held")
    scene.run()
    assert get(platform, held).gate == "Budget"

    with pytest.raises(Forbidden):
        scene.extend(MEMBER)
    assert scene.extend() == ("vision", 5.0, MONTH_END, ADMIN.name)
    scene.run()
    assert state(platform, held) == "Running"
    (standing,) = scene.standings(MEMBER)
    assert (standing.limit, standing.extended) == (15.0, 5.0)
    assert scene.standings(Principal(name="bob", tenant="speech", is_admin=False)) == []


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
    scene: Scene,
    tenant: str,
    queue: str | None,
    gpu_hours: float | None,
    cost: float | None,
    until: float | None,
    error: type[Exception],
    field: str | None,
) -> None:
    scene.declare({"tenant": "vision", "gpuHours": 10})
    with pytest.raises(error) as refused:
        scene.extend(tenant=tenant, queue=queue, gpu_hours=gpu_hours, cost=cost, until=until)
    if field is not None:
        assert isinstance(refused.value, InvalidInput)
        assert [p.field for p in refused.value.problems] == [field]
    with platform.sessions() as session:  # nothing recorded
        assert list(session.scalars(select(BudgetExtension))) == []


def test_a_warn_budget_only_warns_and_a_removed_budget_releases_its_jobs(
    platform: Platform, scene: Scene
) -> None:
    scene.declare({"tenant": "vision", "gpuHours": 10, "action": "warn"}).used(12)
    warned = scene.submit("warned")
    scene.run()
    assert state(platform, warned) == "Running"
    assert tenant_events(platform, "BudgetExhausted")

    scene.declare({"tenant": "vision", "queue": "infer", "gpuHours": 1}).used(2, queue="infer")
    held = scene.submit("held", queue="infer")
    scene.run(times=2)
    assert get(platform, held).gate == "Budget"
    scene.declare().run(times=2)
    assert state(platform, held) == "Running"


def test_a_cost_budget_prices_usage_per_flavor(platform: Platform, scene: Scene) -> None:
    scene.declare(
        {"tenant": "vision", "cost": 100},
        prices=[{"flavor": "default", "gpuHour": 2.5, "cpuHour": 0.5}],
    )
    scene.used(30)  # 15 h of 2 GPUs and 2 CPUs: 30 GPU-hours at 2.5, 30 CPU-hours at 0.5
    (standing,) = scene.standings()
    assert standing.used == pytest.approx(90)
    scene.used(8)  # 8 GPU-hours and 8 CPU-hours more: 24 -> 114
    held = scene.submit("held")
    scene.run()
    job = get(platform, held)
    assert job.reason_code == "BudgetExhausted"
    assert job.reason_details is not None and job.reason_details["used"] == pytest.approx(114)


def test_a_cost_budget_prices_a_job_before_placement_at_its_queues_flavors(
    platform: Platform, scene: Scene
) -> None:
    """A job not yet placed is priced at the dearest GPU-hour of the flavors its queue may use:
    train may use only a100 (1 per GPU-hour), infer has no quota and may use h100 too (4)."""
    on_node = [{"kubernetes.io/hostname": f"node-{i}"} for i in range(2)]
    set_policy(
        platform,
        {
            "flavors": [
                {"name": "a100", "nodeLabels": on_node[0]},
                {"name": "h100", "nodeLabels": on_node[1]},
            ],
            "queues": [
                {"name": "train", "tenant": "vision", "quota": {"a100": {"gpu": 2}}},
                {"name": "infer", "tenant": "vision"},
            ],
            "prices": [{"flavor": "a100", "gpuHour": 1}, {"flavor": "h100", "gpuHour": 4}],
            "budgets": [{"tenant": "vision", "cost": 10}],
        },
    )
    cheap = scene.submit("cheap", gpu=2, maxRuntime="2h")  # 4 GPU-hours: at most 4 on a100
    dear = scene.submit("dear", gpu=2, maxRuntime="2h", queue="infer")  # 16 on h100
    scene.run()
    assert state(platform, cheap) == "Running"
    job = get(platform, dear)
    assert (job.state, job.reason_code) == ("Pending", "BudgetExhausted")
    assert job.reason_details is not None
    assert job.reason_details["job"] == pytest.approx(16)


def test_a_budget_held_array_index_keeps_its_slot(
    platform: Platform, api: TestClient, scene: Scene
) -> None:
    """Six 1-GPU indices, parallelism 2, under a used-up budget (6 GPUs free): the two let
    through are held by the budget and keep their slots, so the others still wait for one
    (Slurm's ``%N`` caps the tasks that run); the new period starts two, not six."""
    scene.declare({"tenant": "vision", "gpuHours": 10, "action": "hold"}).used(10)
    sweep = manifest("sweep", queue="train", array={"indices": "0-5", "parallelism": 2})
    array_id = submit(api, sweep)["id"]

    def indices() -> list[tuple[int | None, str, str | None]]:
        with platform.sessions() as session:
            query = select(Job).where(Job.array_id == array_id).order_by(Job.array_index)
            return [(j.array_index, j.state, j.gate) for j in session.scalars(query)]

    scene.run(times=4)
    held = [(0, "Pending", "Budget"), (1, "Pending", "Budget")]
    assert indices() == held + [(i, "Pending", "ArraySlot") for i in range(2, 6)]
    scene.run(3600)  # the new month
    scene.run()
    assert indices() == [(0, "Running", None), (1, "Running", None)] + [
        (i, "Pending", "ArraySlot") for i in range(2, 6)
    ]


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


def test_the_budget_metric_is_on_metrics(platform: Platform, scene: Scene) -> None:
    from kiban.api.routers.metrics import cluster_metrics

    scene.declare({"tenant": "vision", "queue": "train", "gpuHours": 8}).used(2).run()
    text = cluster_metrics(platform).render().decode()
    assert 'kiban_budget_used_ratio{tenant="vision",queue="train"} 0.25' in text
