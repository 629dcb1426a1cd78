"""Run times estimated from history (jobs with no maxRuntime) in the forecast and in backfill:
they plan like a maxRuntime, and what rests on them is marked."""

from __future__ import annotations

from kiban.scheduler import ReasonCode, Snapshot, schedule
from kiban.scheduler.forward import forecast
from kiban.scheduler.policy import DEFAULT_POLICY
from kiban.testing import JobBuilder, RunningBuilder, cluster, job, queue, running, snapshot


def behind(head: RunningBuilder, *waiting: JobBuilder) -> Snapshot:
    """One 8-GPU node held by ``head`` since 0; the waiting jobs need all of it, in order."""
    return snapshot(
        nodes=cluster().nodes(1, gpus=8),
        running=[head.on("node-0", gpus=8).started(0)],
        pending=waiting,
        now=10,
    )


def forecast_marked(snap: Snapshot) -> tuple[dict[str, float | None], set[str]]:
    estimated: set[str] = set()
    return forecast(snap, DEFAULT_POLICY, estimated=estimated), estimated


def test_a_job_behind_one_with_no_max_runtime_and_no_estimate_gets_no_start() -> None:
    starts, estimated = forecast_marked(behind(running("r"), job("w").replicas(1, gpu=8)))
    assert starts == {"w": None}
    assert estimated == set()


def test_a_job_behind_one_with_an_estimated_run_time_gets_a_start_marked_estimated() -> None:
    starts, estimated = forecast_marked(
        behind(running("r").estimated_runtime(300), job("w").replicas(1, gpu=8))
    )
    assert starts == {"w": 300.0}
    assert estimated == {"w"}


def test_a_max_runtime_wins_over_an_estimate_and_is_not_marked() -> None:
    starts, estimated = forecast_marked(
        behind(running("r").max_runtime(100).estimated_runtime(300), job("w").replicas(1, gpu=8))
    )
    assert starts == {"w": 100.0}
    assert estimated == set()


def test_only_starts_after_the_first_estimated_end_are_marked() -> None:
    """r ends at its maxRuntime (100); a then runs its estimated 50 s, so b starts at 150."""
    starts, estimated = forecast_marked(
        behind(
            running("r").max_runtime(100),
            job("a").replicas(1, gpu=8).estimated_runtime(50).submitted(0),
            job("b").replicas(1, gpu=8).submitted(1),
        )
    )
    assert starts == {"a": 100.0, "b": 150.0}
    assert estimated == {"b"}


def base(*pending: JobBuilder) -> Snapshot:
    """Two 8-GPU nodes; one held until 100 by its maxRuntime; ``big`` needs both."""
    return snapshot(
        nodes=cluster().nodes(2, gpus=8),
        queues=[queue("q").best_effort()],
        running=[running("r").queue("q").on("node-0", gpus=8).max_runtime(100)],
        pending=[job("big").queue("q").replicas(2, gpu=8).submitted(0), *pending],
    )


def test_a_job_estimated_to_end_before_the_reservation_backfills() -> None:
    decisions = schedule(base(job("short").queue("q").replicas(1, gpu=8).estimated_runtime(50)))
    assert [a.job_id for a in decisions.admitted] == ["short"]


def test_a_job_estimated_to_end_after_the_reservation_waits() -> None:
    decisions = schedule(base(job("long").queue("q").replicas(1, gpu=8).estimated_runtime(500)))
    assert decisions.admitted == ()
    codes = {w.job_id: w.reason.code for w in decisions.waiting}
    assert codes["long"] is ReasonCode.BLOCKED_BY_RESERVATION


def test_a_running_job_with_an_estimated_end_gives_a_reservation() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[queue("q").best_effort()],
            running=[running("r").queue("q").on("node-0", gpus=8).estimated_runtime(400)],
            pending=[job("big").queue("q").replicas(2, gpu=8)],
        )
    )
    (wait,) = decisions.waiting
    assert wait.reason.code is ReasonCode.WAITING_FOR_RESERVATION
    assert wait.reserved_at == 400
