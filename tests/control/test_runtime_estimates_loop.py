"""Run-time estimates in the live loop: learned as jobs finish, kept across restarts, and used
by the start-time forecast for a job waiting behind one with no maxRuntime (issue 26)."""

from __future__ import annotations

import math
from pathlib import Path

from loop_support import get
from sqlalchemy import func, select

from kiban.api.routers.metrics import cluster_metrics
from kiban.api.schemas import job_out
from kiban.platform import Platform, build_platform
from kiban.services.runtime_estimates import estimate_for_job
from kiban.store.models import Job, RuntimeObservation
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform


def run_for(platform: Platform, executor: FakeExecutor, clock: ManualClock, seconds: float) -> str:
    """A ``train`` job with no maxRuntime that starts, runs ``seconds`` and succeeds."""
    job_id = submit_to_platform(platform, manifest("train", replicas=3, gpu=2))
    clock.advance(1)
    platform.loop.run_once()
    assert get(platform, job_id).state == "Running"
    clock.advance(seconds)
    executor.finish_all(job_id, exit_code=0)
    platform.loop.run_once()
    assert get(platform, job_id).state == "Succeeded"
    return job_id


def test_the_eta_of_a_job_behind_one_with_no_max_runtime_is_present_and_marked_estimated(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    run_for(platform, executor, clock, 300)
    run_for(platform, executor, clock, 500)  # the same job again: its median run is 400 s
    current = submit_to_platform(platform, manifest("train", replicas=3, gpu=2))
    clock.advance(1)
    platform.loop.run_once()
    started = get(platform, current).started_at
    assert started is not None

    behind = submit_to_platform(platform, manifest("second", replicas=3, gpu=2))
    clock.advance(10)  # past the forecast interval
    platform.loop.run_once()
    waiting = get(platform, behind)
    assert waiting.state == "Pending"
    assert waiting.eta == round(started + 400)
    assert waiting.eta_estimated is True

    with platform.sessions() as session:
        running = session.get(Job, current)
        assert running is not None
        estimate = estimate_for_job(platform.loop.runtime_estimates, session, running)
        document = job_out(running, estimate=estimate).model_dump(by_alias=True)
        assert document["estimatedRuntime"] == {
            "seconds": 400.0,
            "basis": "user+name+command+gpus (2 runs)",
            "samples": 2,
            "confidence": 0.48,  # 0.9 * 2/3 / (1 + 100/400)
        }
        waiting_document = job_out(waiting).model_dump(by_alias=True)
        assert waiting_document["etaEstimated"] is True


def test_an_estimate_never_stops_a_job_that_runs_past_it(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    run_for(platform, executor, clock, 100)
    run_for(platform, executor, clock, 100)
    current = submit_to_platform(platform, manifest("train", replicas=3, gpu=2))
    clock.advance(1)
    platform.loop.run_once()
    clock.advance(1000)  # ten times its estimate
    platform.loop.run_once()
    assert get(platform, current).state == "Running"


def test_failed_runs_are_not_learned_from(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    job_id = submit_to_platform(platform, manifest("train", replicas=3, gpu=2))
    clock.advance(1)
    platform.loop.run_once()
    clock.advance(50)
    executor.finish_all(job_id, exit_code=1)
    platform.loop.run_once()
    assert get(platform, job_id).state == "Failed"
    with platform.sessions() as session:
        assert session.scalar(select(func.count()).select_from(RuntimeObservation)) == 0


def test_what_was_learned_is_learned_back_after_a_restart(
    tmp_path: Path, db_url: str, executor: FakeExecutor, clock: ManualClock
) -> None:
    first = build_platform(home=tmp_path / "home", db_url=db_url, executor=executor, clock=clock)
    try:
        run_for(first, executor, clock, 300)
        run_for(first, executor, clock, 500)
        run_for(first, executor, clock, 450)  # predicted 400 before: 11.1 % off
        before = first.loop.runtime_estimates.error_summary()
        scraped = cluster_metrics(first).render().decode().splitlines()
    finally:
        first.close()
    assert before["samples"] == 1.0
    assert math.isclose(before["mdape"], 100 * 50 / 450)
    assert f"kiban_runtime_estimate_error_percent {100 * 50 / 450!r}" in scraped
    assert "kiban_runtime_estimate_checked 1.0" in scraped

    second = build_platform(home=tmp_path / "home", db_url=db_url, executor=executor, clock=clock)
    try:
        clock.advance(1)
        second.loop.run_once()  # a pass learns the stored runs back
        assert second.loop.runtime_estimates.error_summary() == before
        current = submit_to_platform(second, manifest("train", replicas=3, gpu=2))
        with second.sessions() as session:
            job = session.get(Job, current)
            assert job is not None
            estimate = estimate_for_job(second.loop.runtime_estimates, session, job)
        assert estimate is not None
        assert (estimate.seconds, estimate.samples) == (450.0, 3)  # median(300, 500, 450)
    finally:
        second.close()
