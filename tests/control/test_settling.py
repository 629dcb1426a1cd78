"""Settling applied through the loop: what the pure rules decide reaches the store."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from loop_support import events, get, state
from sqlalchemy import Connection, event, text

from kiban.control.loop_settings import LoopSettings, LoopSettingsError
from kiban.executors.base import ReplicaRef
from kiban.platform import Platform
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform


def lose_replicas(executor: FakeExecutor, job_id: str) -> None:
    """Its replicas vanish (their pod or node gone): the executor no longer knows them."""
    for key in [k for k in executor.replicas if k[0] == job_id]:
        del executor.replicas[key]


def test_a_job_requeued_after_a_lost_replica_keeps_its_retries(
    platform: Platform, executor: FakeExecutor
) -> None:
    """A lost replica is no fault of the job's: its next failure is still retried (the
    attempt number alone counted it against backoffLimit before)."""
    job_id = submit_to_platform(platform, manifest(restartPolicy="OnFailure", backoffLimit=1))
    platform.loop.run_once()
    lose_replicas(executor, job_id)
    platform.loop.run_once()
    job = get(platform, job_id)  # requeued and started again in the same pass
    assert (job.state, job.attempt, job.failed_attempts) == ("Running", 2, 0)
    assert ("Requeued", "a replica was lost; waits in queue default again") in events(
        platform, job_id
    )

    executor.finish(job_id, 0, 1)
    platform.loop.run_once()
    job = get(platform, job_id)
    assert (job.state, job.attempt, job.failed_attempts) == ("Running", 3, 1)  # restarted
    executor.finish(job_id, 0, 1)
    platform.loop.run_once()
    job = get(platform, job_id)
    assert (job.state, job.failed_attempts) == ("Failed", 2)  # its one retry used


def test_a_stopping_job_with_no_intent_is_left_and_logged_not_failed(
    platform: Platform, executor: FakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = submit_to_platform(platform, manifest())
    platform.loop.run_once()
    other = submit_to_platform(platform, manifest("other"))
    platform.loop.run_once()
    with platform.engine.begin() as connection:  # a store changed by hand
        connection.execute(
            text("UPDATE jobs SET state = 'Stopping', stop_intent = NULL WHERE id = :id"),
            {"id": job_id},
        )
    executor.finish_all(job_id)
    executor.finish_all(other)
    with caplog.at_level(logging.ERROR, logger="kiban.control"):
        platform.loop.run_once()
    assert state(platform, job_id) == "Stopping"
    assert f"job {job_id} cannot be settled" in caplog.text
    assert "is stopping with no stop intent" in caplog.text
    assert state(platform, other) == "Succeeded"  # the others are settled all the same


def test_a_preemption_says_why_in_its_event(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    """The scheduler's reason for the preemption is the message of the event."""
    low = submit_to_platform(platform, manifest("low", replicas=3, gpu=2))
    platform.loop.run_once()
    high = submit_to_platform(platform, manifest("high", replicas=3, gpu=2, priorityClass="high"))
    platform.loop.run_once()
    preempted = [(r, m) for r, m in events(platform, low) if r == "Preempted"]
    assert preempted == [
        ("Preempted", f"preempted (priority) to make room for job {high}; it returns to its queue")
    ]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"tick_s": 0}, "tick_s: must be more than 0 seconds, not 0"),
        ({"resync_s": -1.0}, "resync_s: must be more than 0 seconds, not -1.0"),
        ({"node_sync_s": 0.0}, "node_sync_s: must be more than 0 seconds, not 0.0"),
        ({"min_interval_s": -0.5}, "min_interval_s: must be 0 seconds or more, not -0.5"),
        ({"forecast_every_s": "5"}, "forecast_every_s: must be a number of seconds, not '5'"),
        ({"tick_s": float("nan")}, "tick_s: must be a number of seconds, not nan"),
        ({"window": 0}, "window: must be a whole number of at least 1, not 0"),
        ({"window": 2.5}, "window: must be a whole number of at least 1, not 2.5"),
        ({"engine_policy": None}, "engine_policy: must be a Policy, not None"),
    ],
)
def test_loop_settings_out_of_range_are_refused_by_name(
    fields: dict[str, object], error: str
) -> None:
    with pytest.raises(LoopSettingsError) as refused:
        LoopSettings(**fields)  # type: ignore[arg-type]
    assert str(refused.value) == error


def test_loop_settings_cannot_change_once_given() -> None:
    settings = LoopSettings(window=8, node_sync_s=None)
    with pytest.raises(AttributeError):
        settings.window = 9  # type: ignore[misc]


class TransactionWatch:
    """Counts the store's open transactions (engine events) and, at each executor stop, how
    many were open: a stop is network I/O on Kubernetes and must hold no row lock."""

    def __init__(self, platform: Platform, executor: FakeExecutor) -> None:
        self.open = 0
        self.at_stops: list[int] = []
        engines = {platform.engine, platform.control_engine or platform.engine}
        for engine in engines:
            for name, step in (("begin", 1), ("commit", -1), ("rollback", -1)):
                event.listen(engine, name, self._counter(step))
        stop = executor.stop

        def watched(replica: ReplicaRef, *, force: bool) -> None:
            self.at_stops.append(self.open)
            stop(replica, force=force)

        executor.stop = watched  # type: ignore[method-assign]

    def _counter(self, step: int) -> Callable[[Connection], None]:
        def count(_connection: Connection) -> None:
            self.open += step

        return count


def test_no_executor_stop_is_made_with_a_transaction_open(
    platform: Platform, executor: FakeExecutor, api: TestClient, clock: ManualClock
) -> None:
    """Success, a cancel with its grace period run out, a failure restarted, a preemption: each
    stop of each replica is made with no transaction of the store open."""
    done = submit_to_platform(platform, manifest("done", replicas=2))
    cancelled = submit_to_platform(
        platform, manifest("cancelled", replicas=2, terminationGracePeriod="30s")
    )
    retried = submit_to_platform(platform, manifest("retried", restartPolicy="OnFailure"))
    platform.loop.run_once()
    watch = TransactionWatch(platform, executor)

    executor.finish_all(done, 0)
    for rank in (0, 1):
        executor.replicas[(cancelled, 1, rank)].ignores_sigterm = True
    assert api.post(f"/api/v1/jobs/{cancelled}/cancel").status_code == 200
    executor.finish(retried, 0, 1)
    platform.loop.run_once()  # done released, cancelled asked, retried relaunched
    clock.advance(31)
    platform.loop.run_once()  # cancelled killed
    platform.loop.run_once()  # cancelled finished: released
    assert (state(platform, done), state(platform, cancelled)) == ("Succeeded", "Cancelled")
    assert get(platform, retried).attempt == 2
    low = submit_to_platform(platform, manifest("low", replicas=2, gpu=2))
    platform.loop.run_once()
    submit_to_platform(platform, manifest("high", replicas=3, gpu=2, priorityClass="high"))
    platform.loop.run_once()  # low preempted: stop_for
    assert state(platform, low) in ("Stopping", "Pending")

    assert len(watch.at_stops) >= 9, watch.at_stops  # 2 + 2 + 2 + 2 + 1 + 2 at least
    assert set(watch.at_stops) == {0}, watch.at_stops
