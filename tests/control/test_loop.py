"""The control loop driven pass by pass with a fake executor and a manual clock, on each store."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from loop_support import ADMIN, cancel, events, get, replica_rows, state
from sqlalchemy import select

from kiban.api.schemas import job_out
from kiban.control.loop_settings import LoopSettings
from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import (
    CANNOT_START,
    EXIT_CANNOT_START,
    Capability,
    LaunchError,
    LaunchRequest,
    ReplicaRef,
)
from kiban.executors.environment import replica_environment
from kiban.platform import Platform, build_platform
from kiban.scheduler import ReasonCode
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.services import jobs, tenants
from kiban.services.errors import InvalidInput
from kiban.services.policy import apply_policy
from kiban.store.models import Event, Job, Replica
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform


def reasons(platform: Platform, job_id: str) -> list[str]:
    return [reason for reason, _ in events(platform, job_id)]


def launches_of(executor: FakeExecutor, job_id: str) -> list[LaunchRequest]:
    return [r for r in executor.launches if r.job_id == job_id]


# -- starting and finishing ------------------------------------------------------------------


def test_submitted_job_runs_with_replica_rows_and_launch_request(
    platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit_to_platform(platform, manifest(replicas=2, gpu=2, env={"EPOCHS": "3"}))
    assert state(platform, job_id) == "Pending"

    platform.loop.run_once()

    job = get(platform, job_id)
    assert job.state == "Running"
    assert job.started_at == platform.clock.now()
    rows = replica_rows(platform, job_id)
    assert [(r.rank, r.attempt, r.active, r.state) for r in rows] == [
        (0, 1, True, "Running"),
        (1, 1, True, "Running"),
    ]
    assert all(r.pid is not None and len(r.gpu_ids) == 2 for r in rows)
    assert len({r.node for r in rows}) == 2  # 2 GPUs per node: one replica per node

    (request,) = launches_of(executor, job_id)
    assert (request.attempt, request.master_port) == (1, job.master_port)
    assert [(p.rank, p.node, p.gpu_ids) for p in request.placements] == [
        (r.rank, r.node, tuple(r.gpu_ids)) for r in rows
    ]
    assert request.spec.tasks[0].env == {"EPOCHS": "3"}
    env = replica_environment(
        job_id=job_id,
        job_name=request.job_name,
        attempt=request.attempt,
        task=request.spec.tasks[0],
        placement=request.placements[1],
        world_size=len(request.placements),
        master_addr=request.placements[0].node,
        master_port=request.master_port,
        checkpoint_dir=executor.checkpoint_dir(job_id),
    )
    assert env["RANK"] == "1"
    assert env["WORLD_SIZE"] == "2"
    assert env["EPOCHS"] == "3"
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, rows[1].gpu_ids))
    assert reasons(platform, job_id) == ["Submitted", "Admitted", "Started"]


def test_success_frees_resources_for_the_next_job(
    platform: Platform, executor: FakeExecutor
) -> None:
    first = submit_to_platform(platform, manifest("first", replicas=3, gpu=2))
    second = submit_to_platform(platform, manifest("second", replicas=1, gpu=2))
    platform.loop.run_once()
    assert (state(platform, first), state(platform, second)) == ("Running", "Pending")
    assert get(platform, second).reason_code == ReasonCode.INSUFFICIENT_CAPACITY

    executor.finish(first, 0)
    executor.finish(first, 1)
    platform.loop.run_once()
    assert state(platform, first) == "Running"  # rank 2 still runs

    executor.finish(first, 2)
    platform.loop.run_once()

    done = get(platform, first)
    assert done.state == "Succeeded"
    assert done.finished_at == platform.clock.now()
    assert all(not r.active and r.exit_code == 0 for r in replica_rows(platform, first))
    assert state(platform, second) == "Running"
    assert reasons(platform, first) == [
        "Submitted",
        "Admitted",
        "Started",
        "ReplicaExited",
        "ReplicaExited",
        "ReplicaExited",
        "Succeeded",
    ]


# -- failures --------------------------------------------------------------------------------


def test_failed_replica_stops_the_others_then_fails_the_job(
    platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit_to_platform(platform, manifest(replicas=3, gpu=1))
    platform.loop.run_once()

    executor.finish(job_id, 1, 1)
    platform.loop.run_once()

    job = get(platform, job_id)
    assert job.state == "Stopping"
    others = [executor.replicas[(job_id, 1, rank)] for rank in (0, 2)]
    assert [r.stop_requests for r in others] == [[False], [False]]  # SIGTERM, not a kill
    assert executor.replicas[(job_id, 1, 1)].stop_requests == []

    platform.loop.run_once()

    job = get(platform, job_id)
    assert job.state == "Failed"
    assert job.message == "replica worker[1] (rank 1) exited with code 1"
    assert all(not r.active for r in replica_rows(platform, job_id))
    assert executor.running(job_id) == []
    assert reasons(platform, job_id)[-3:] == ["ReplicaExited", "ReplicaExited", "Failed"]
    assert "ReplicaFailed" in reasons(platform, job_id)


def test_on_failure_restarts_on_the_same_placement_until_the_backoff_limit(
    platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit_to_platform(
        platform, manifest(replicas=2, gpu=1, restartPolicy="OnFailure", backoffLimit=1)
    )
    platform.loop.run_once()
    first = [(r.rank, r.node, r.gpu_ids) for r in replica_rows(platform, job_id)]

    executor.finish(job_id, 0, 1)
    platform.loop.run_once()
    assert state(platform, job_id) == "Stopping"
    assert get(platform, job_id).message == (
        "replica worker[0] (rank 0) exited with code 1; restarting"
    )
    platform.loop.run_once()

    job = get(platform, job_id)
    assert (job.state, job.attempt) == ("Running", 2)
    current = [r for r in replica_rows(platform, job_id) if r.attempt == 2]
    assert [(r.rank, r.node, r.gpu_ids) for r in current] == first
    assert all(r.active for r in current)
    assert [r.attempt for r in launches_of(executor, job_id)] == [1, 2]
    assert len(executor.running(job_id)) == 2

    executor.finish(job_id, 1, 2)
    platform.loop.run_once()
    platform.loop.run_once()

    job = get(platform, job_id)
    assert (job.state, job.attempt) == ("Failed", 2)
    assert job.message == "replica worker[1] (rank 1) exited with code 2"
    assert len(launches_of(executor, job_id)) == 2
    assert reasons(platform, job_id).count("Restarting") == 1


def test_a_container_that_cannot_start_fails_the_job_without_retries(
    platform: Platform, executor: FakeExecutor
) -> None:
    """Its image or configuration is at fault: a restart would start the same container."""
    job_id = submit_to_platform(
        platform, manifest(replicas=2, gpu=1, restartPolicy="OnFailure", backoffLimit=3)
    )
    platform.loop.run_once()
    why = f'{CANNOT_START}: InvalidImageName: couldn\'t parse image name "Train:9"'
    executor.finish(job_id, 0, EXIT_CANNOT_START, message=why)
    platform.loop.run_once()
    platform.loop.run_once()

    job = get(platform, job_id)
    assert (job.state, job.attempt) == ("Failed", 1)
    assert job.message == (
        f"replica worker[0] (rank 0) exited with code {EXIT_CANNOT_START}: {why}; "
        "not retried, as every attempt starts the same container"
    )
    assert len(launches_of(executor, job_id)) == 1
    assert "Restarting" not in reasons(platform, job_id)


def test_single_replica_failure_fails_in_one_pass(
    platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit_to_platform(platform, manifest())
    platform.loop.run_once()
    executor.finish(job_id, 0, 3)
    platform.loop.run_once()
    assert state(platform, job_id) == "Failed"
    assert reasons(platform, job_id)[3:] == ["ReplicaExited", "ReplicaFailed", "Failed"]


def test_what_a_running_replica_waits_for_is_kept_shown_and_an_event_once(
    platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit_to_platform(platform, manifest())
    platform.loop.run_once()
    fake = executor.running(job_id)[0]
    why = 'waiting for its image: ImagePullBackOff: Back-off pulling image "train:9"'
    fake.waiting = why
    platform.loop.run_once()
    platform.loop.run_once()
    assert [r.waiting for r in replica_rows(platform, job_id)] == [why]
    assert reasons(platform, job_id).count("ReplicaWaiting") == 1  # not one per pass
    assert events(platform, job_id)[-1][1] == f"replica worker[0] (rank 0) is {why}"
    with platform.sessions() as session:
        shown = job_out(session.get(Job, job_id), replica_rows(platform, job_id))
    assert shown.replicas[0].waiting == why
    fake.waiting = ""  # the image came: it runs
    platform.loop.run_once()
    assert [r.waiting for r in replica_rows(platform, job_id)] == [None]
    assert state(platform, job_id) == "Running"


def test_max_runtime_exceeded(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    job_id = submit_to_platform(platform, manifest(replicas=2, maxRuntime="60s"))
    platform.loop.run_once()

    clock.advance(60)
    platform.loop.run_once()
    assert state(platform, job_id) == "Running"  # at the limit, not past it

    clock.advance(1)
    platform.loop.run_once()
    job = get(platform, job_id)
    assert job.state == "Stopping"
    assert job.message == "ran longer than maxRuntime (1m)"
    assert all(r.stop_requests == [False] for r in executor.replicas.values())

    platform.loop.run_once()
    job = get(platform, job_id)
    assert job.state == "Failed"
    assert job.message == "ran longer than maxRuntime (1m)"
    assert "DeadlineExceeded" in reasons(platform, job_id)


def test_launch_error_fails_the_job_and_holds_nothing(
    platform: Platform, executor: FakeExecutor
) -> None:
    executor.fail_next_launch = "boom"
    failed = submit_to_platform(platform, manifest("failed", replicas=3, gpu=2))
    platform.loop.run_once()

    job = get(platform, failed)
    assert job.state == "Failed"
    assert job.message == "boom"
    assert [(r.active, r.state) for r in replica_rows(platform, failed)] == [(False, "Lost")] * 3
    assert executor.running() == []
    assert reasons(platform, failed) == ["Submitted", "Admitted", "LaunchFailed"]

    after = submit_to_platform(platform, manifest("after", replicas=3, gpu=2))
    platform.loop.run_once()
    assert state(platform, after) == "Running"  # all 6 GPUs were given back


# -- cancelling ------------------------------------------------------------------------------


def test_cancel_of_pending_job_is_immediate(platform: Platform, executor: FakeExecutor) -> None:
    # all 6 GPUs, first
    everything = submit_to_platform(platform, manifest("all", gpu=2, replicas=3))
    job_id = submit_to_platform(platform, manifest("waits", gpu=2))
    platform.loop.run_once()
    assert get(platform, job_id).reason_code == ReasonCode.INSUFFICIENT_CAPACITY.value
    cancel(platform, job_id)
    job = get(platform, job_id)
    assert job.state == "Cancelled"
    assert job.reason_code is None and job.queue_position is None
    platform.loop.run_once()
    assert [launch.job_id for launch in executor.launches] == [everything]


def test_cancel_stops_gracefully_and_kills_only_after_the_grace_period(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    job_id = submit_to_platform(platform, manifest(replicas=2, terminationGracePeriod="20s"))
    platform.loop.run_once()
    stubborn = executor.replicas[(job_id, 1, 1)]
    stubborn.ignores_sigterm = True

    cancel(platform, job_id)
    assert state(platform, job_id) == "Stopping"
    platform.loop.run_once()
    polite = executor.replicas[(job_id, 1, 0)]
    assert polite.stop_requests == [False]
    assert polite.exit_code == 143

    clock.advance(19)
    platform.loop.run_once()
    assert state(platform, job_id) == "Stopping"
    assert True not in stubborn.stop_requests  # not killed within the grace period
    assert stubborn.exit_code is None

    clock.advance(1)
    platform.loop.run_once()
    assert stubborn.stop_requests[-1] is True
    assert stubborn.exit_code == 137
    assert "Killed" in reasons(platform, job_id)

    platform.loop.run_once()
    job = get(platform, job_id)
    assert job.state == "Cancelled"
    assert all(not r.active for r in replica_rows(platform, job_id))
    assert reasons(platform, job_id)[-1] == "Cancelled"
    assert reasons(platform, job_id).count("Killed") == 1


def test_replicas_ending_because_they_were_stopped_are_no_warnings(
    platform: Platform, executor: FakeExecutor
) -> None:
    """A cancel asks the replicas to end: their exits (143) and pods deleted under them (on
    Kubernetes the pod goes with its container) are what was asked, not failures to warn of."""
    job_id = submit_to_platform(platform, manifest(replicas=2))
    platform.loop.run_once()
    cancel(platform, job_id)
    del executor.replicas[(job_id, 1, 1)]  # its pod is gone before its exit was seen
    platform.loop.run_once()
    platform.loop.run_once()
    assert state(platform, job_id) == "Cancelled"
    with platform.sessions() as session:
        ended = session.scalars(
            select(Event).where(Event.object_name == job_id, Event.reason == "ReplicaExited")
        ).all()
        seen = sorted((e.type, e.message) for e in ended)
    assert seen == [
        ("Normal", "replica worker[0] (rank 0) exited with code 143"),
        ("Normal", "replica worker[1] (rank 1) stopped: unknown to the fake executor"),
    ]


def test_a_kill_is_sent_and_recorded_once(
    platform: Platform, executor: FakeExecutor, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed replica may take a few passes to be seen gone; it is not killed over and over."""
    job_id = submit_to_platform(platform, manifest(terminationGracePeriod="5s"))
    platform.loop.run_once()
    fake = executor.replicas[(job_id, 1, 0)]
    fake.ignores_sigterm = True

    def slow_kill(replica: ReplicaRef, *, force: bool) -> None:
        fake.stop_requests.append(force)  # the kill lands, but the exit is seen later

    monkeypatch.setattr(executor, "stop", slow_kill)
    cancel(platform, job_id)
    clock.advance(5)
    for _ in range(3):
        platform.loop.run_once()
    assert fake.stop_requests == [False, True]
    assert reasons(platform, job_id).count("Killed") == 1

    monkeypatch.undo()
    executor.finish(job_id, 0, 137)
    platform.loop.run_once()
    assert state(platform, job_id) == "Cancelled"


def test_cancel_during_launch_is_not_lost(
    platform: Platform, executor: FakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API may cancel a job while the loop is still launching it."""
    job_id = submit_to_platform(platform, manifest(replicas=2))
    launch = executor.launch

    def launch_then_cancel(request: LaunchRequest) -> Any:
        launched = launch(request)
        cancel(platform, request.job_id)
        return launched

    monkeypatch.setattr(executor, "launch", launch_then_cancel)
    platform.loop.run_once()
    assert state(platform, job_id) == "Stopping"

    platform.loop.run_once()
    platform.loop.run_once()
    assert state(platform, job_id) == "Cancelled"
    assert executor.running(job_id) == []


def test_admitted_jobs_launch_together_where_the_executor_allows(
    platform: Platform, executor: FakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three jobs admitted in one pass launch at once on an executor that takes three
    launches at a time (each waits for the others at a barrier: one at a time would time out);
    one launch fails, and only its job fails."""
    ids = [submit_to_platform(platform, manifest(f"job-{i}", gpu=2)) for i in range(3)]
    executor.launch_concurrency = 3
    together = threading.Barrier(3, timeout=10)
    launch = executor.launch

    def launch_together(request: LaunchRequest) -> Any:
        together.wait()
        if request.job_id == ids[1]:
            raise LaunchError("the API refused job-1")
        return launch(request)

    monkeypatch.setattr(executor, "launch", launch_together)
    platform.loop.run_once()

    assert [state(platform, job_id) for job_id in ids] == ["Running", "Failed", "Running"]
    assert get(platform, ids[1]).message == "the API refused job-1"
    assert reasons(platform, ids[0]) == ["Submitted", "Admitted", "Started"]
    assert reasons(platform, ids[1]) == ["Submitted", "Admitted", "LaunchFailed"]
    assert [(r.active, r.state) for r in replica_rows(platform, ids[1])] == [(False, "Lost")]
    assert all(
        r.pid is not None for job_id in (ids[0], ids[2]) for r in replica_rows(platform, job_id)
    )
    assert sorted(r.job_id for r in executor.launches) == sorted([ids[0], ids[2]])


# -- restarts of the control plane -----------------------------------------------------------


class Crash(BaseException):
    """The control plane dies in the middle of a launch (no ``except Exception`` stops it)."""


def test_recover_requeues_a_job_cut_short_while_launching(
    platform: Platform, executor: FakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = submit_to_platform(platform, manifest(replicas=2))

    def crash(request: LaunchRequest) -> Any:
        raise Crash

    monkeypatch.setattr(executor, "launch", crash)
    with pytest.raises(Crash):
        platform.loop.run_once()
    assert state(platform, job_id) == "Admitted"
    assert all(r.active for r in replica_rows(platform, job_id))

    monkeypatch.undo()
    platform.loop.recover()

    job = get(platform, job_id)
    assert job.state == "Pending"
    assert job.admitted_at is None
    assert all(not r.active and r.state == "Lost" for r in replica_rows(platform, job_id))
    assert reasons(platform, job_id)[-1] == "Requeued"

    platform.loop.run_once()
    assert state(platform, job_id) == "Running"
    active = [r for r in replica_rows(platform, job_id) if r.active]
    assert [r.rank for r in active] == [0, 1]


def test_recover_stops_replicas_of_attempts_the_store_no_longer_holds_active(
    platform: Platform, executor: FakeExecutor
) -> None:
    """A control plane stopped between a job's end and its replicas' removal left them."""
    ended, running = (submit_to_platform(platform, manifest(name)) for name in ("ended", "running"))
    platform.loop.run_once()
    with platform.sessions() as session:  # its end was recorded, the stop never sent
        for row in session.scalars(select(Replica).where(Replica.job_id == ended)):
            row.active = False
        session.commit()
    spec = parse_job_manifest(manifest()).spec
    placement = ReplicaPlacement("worker", 0, 0, "node-2", (1,), 1000, 2**30)
    # replicas of a job this store does not know (another kiban's, perhaps): left alone
    executor.launch(LaunchRequest("other-kiban-job", "x", "t", 1, spec, (placement,), 0))

    platform.loop.recover()

    assert executor.running(ended) == []
    assert len(executor.running(running)) == 1
    assert executor.attempts() == {(running, 1), ("other-kiban-job", 1)}


@pytest.mark.parametrize(
    "error",
    [ValueError("embedded null byte"), ConnectionResetError("the API server went away")],
    ids=["value-error", "api-gone"],
)
def test_any_exception_in_a_launch_ends_that_attempt_and_frees_its_gpus(
    platform: Platform, executor: FakeExecutor, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """Not a LaunchError (a bug, a value the OS refuses, an API gone mid-call): the job fails
    with the error in its events, what the launch started is abandoned, its GPUs are free for
    the next job, and the rest of its pass's jobs start. (Before, it stayed Admitted holding
    its GPUs, and was admitted and stuck again after each restart.)"""
    broken = submit_to_platform(platform, manifest("broken", gpu=2, replicas=2))
    fine = submit_to_platform(platform, manifest("fine", gpu=2))
    launch = executor.launch
    abandoned: list[tuple[str, int]] = []
    abandon = executor.abandon

    def launch_or_break(request: LaunchRequest) -> Any:
        if request.job_id == broken:
            launch(request)  # started something, then broke
            raise error
        return launch(request)

    def record_abandon(job_id: str, attempt: int) -> None:
        abandoned.append((job_id, attempt))
        abandon(job_id, attempt)

    monkeypatch.setattr(executor, "launch", launch_or_break)
    monkeypatch.setattr(executor, "abandon", record_abandon)
    platform.loop.run_once()

    assert (state(platform, broken), state(platform, fine)) == ("Failed", "Running")
    job = get(platform, broken)
    assert job.message == f"the launch failed: {type(error).__name__}: {error}"
    assert reasons(platform, broken) == ["Submitted", "Admitted", "LaunchFailed"]
    assert [(r.active, r.state) for r in replica_rows(platform, broken)] == [(False, "Lost")] * 2
    assert abandoned == [(broken, 1)]
    assert executor.running(broken) == []

    monkeypatch.undo()
    platform.loop.recover()  # nothing is left Admitted for a restart to find
    assert state(platform, broken) == "Failed"
    after = submit_to_platform(platform, manifest("after", gpu=2, replicas=2))
    platform.loop.run_once()
    assert state(platform, after) == "Running"  # 4 of 6 GPUs: the failed job's were given back


# -- waiting ---------------------------------------------------------------------------------


def strict_default_queue(platform: Platform, clock: ManualClock) -> None:
    """The default queue made StrictFIFO (it is BestEffortFIFO unless the policy says)."""
    with platform.sessions() as session:
        policy = {"queues": [{"name": "default", "strategy": "StrictFIFO"}]}
        apply_policy(session, policy, actor="admin", at=clock.now())
        session.commit()
    platform.refresh_policy()


def test_waiting_job_records_reason_position_and_one_event_per_change(
    platform: Platform, clock: ManualClock
) -> None:
    strict_default_queue(platform, clock)
    running = submit_to_platform(platform, manifest("running", replicas=3, gpu=2))
    platform.loop.run_once()
    head = submit_to_platform(platform, manifest("head", gpu=2))
    clock.advance(1)
    behind = submit_to_platform(platform, manifest("behind", gpu=1))
    for _ in range(3):
        platform.loop.run_once()

    job = get(platform, head)
    assert (job.state, job.reason_code, job.queue_position) == (
        "Pending",
        "InsufficientCapacity",
        1,
    )
    assert job.reason_message is not None and "needs 1 replica (1x2 GPUs)" in job.reason_message
    assert job.reason_details is not None and job.reason_details["free_gpus"] == 0
    job = get(platform, behind)
    assert (job.reason_code, job.queue_position) == ("BlockedByQueueHead", 2)
    assert job.reason_details == {"queue": "default", "head": head}
    assert reasons(platform, head) == ["Submitted", "InsufficientCapacity"]
    assert reasons(platform, behind) == ["Submitted", "BlockedByQueueHead"]

    cancel(platform, head)
    platform.loop.run_once()
    platform.loop.run_once()
    job = get(platform, behind)
    assert (job.reason_code, job.queue_position) == ("InsufficientCapacity", 1)
    assert reasons(platform, behind) == ["Submitted", "BlockedByQueueHead", "InsufficientCapacity"]
    assert state(platform, running) == "Running"


def test_queue_quota_reason_from_the_store(platform: Platform) -> None:
    with platform.sessions() as session:
        tenants.create_queue(
            session,
            ADMIN,
            name="small",
            tenant="default",
            gpu_quota=2,
            strategy="BestEffortFIFO",
            at=platform.clock.now(),
        )
        session.commit()
    first = submit_to_platform(platform, manifest("first", gpu=2, queue="small"))
    second = submit_to_platform(platform, manifest("second", gpu=1, queue="small"))
    platform.loop.run_once()
    assert state(platform, first) == "Running"
    job = get(platform, second)
    assert job.reason_code == "QueueQuotaExhausted"
    assert job.reason_details is not None
    assert (job.reason_details["in_use_gpus"], job.reason_details["nominal_gpus"]) == (2, 2)


def test_spec_round_trips_through_the_store(platform: Platform) -> None:
    document = manifest(replicas=2, maxRuntime="1h")
    job_id = submit_to_platform(platform, document)
    assert parse_job_manifest(get(platform, job_id).spec).spec.max_runtime == 3600.0


def test_relaunch_after_recover_lists_each_replica_once(
    platform: Platform, executor: FakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = submit_to_platform(platform, manifest(replicas=2))

    def crash(request: LaunchRequest) -> Any:
        raise Crash

    monkeypatch.setattr(executor, "launch", crash)
    with pytest.raises(Crash):
        platform.loop.run_once()
    monkeypatch.undo()
    platform.loop.recover()
    platform.loop.run_once()

    with platform.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        listed = [(r.rank, r.state) for r in jobs.replicas_of(session, job)]
    assert listed == [(0, "Running"), (1, "Running")]


@pytest.mark.parametrize("loop_settings", [LoopSettings(window=2)])
def test_a_pass_admitting_from_a_full_window_asks_for_the_next_at_once(
    platform: Platform, clock: ManualClock
) -> None:
    """Jobs behind a full window are considered by the very next pass once admissions made
    room, not at the next resync: ``schedule`` says a pass should follow at once."""
    ids = [submit_to_platform(platform, manifest(f"job-{i}", gpu=1)) for i in range(3)]
    assert platform.loop.schedule(clock.now()) is True  # job-0 and job-1; job-2 is behind
    assert [state(platform, job_id) for job_id in ids] == ["Running", "Running", "Pending"]
    assert platform.loop.schedule(clock.now()) is False  # the window is no longer full
    assert state(platform, ids[2]) == "Running"


@pytest.mark.parametrize("loop_settings", [LoopSettings(window=3)])
def test_jobs_beyond_the_window_wait_in_the_backlog_until_they_reach_it(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    strict_default_queue(platform, clock)
    ids = []
    for i in range(5):
        ids.append(submit_to_platform(platform, manifest(f"job-{i}", gpu=2, replicas=3)))
        clock.advance(1)
    platform.loop.run_once()
    shown = {job_id: job_out(get(platform, job_id)) for job_id in ids}
    assert state(platform, ids[0]) == "Running"
    # The window holds the first three pending jobs: job-0 (started), job-1 and job-2.
    codes = {job_id: view.reason.code if view.reason else None for job_id, view in shown.items()}
    assert [codes[j] for j in ids[1:3]] == ["InsufficientCapacity", "BlockedByQueueHead"]
    # The others have no recorded reason (a pass writes nothing for them); readers say why.
    assert [get(platform, j).reason_code for j in ids[3:]] == [None, None]
    assert [codes[j] for j in ids[3:]] == ["QueueBacklog", "QueueBacklog"]
    backlog = shown[ids[4]].reason
    assert backlog is not None and "first 256 pending jobs of queue default" in backlog.message
    assert shown[ids[4]].queue_position is None

    executor.finish_all(ids[0])
    platform.loop.run_once()  # job-1 starts; the window moves on
    platform.loop.run_once()
    assert state(platform, ids[1]) == "Running"
    assert get(platform, ids[4]).reason_code == "BlockedByQueueHead"
    assert get(platform, ids[4]).queue_position == 3


def on_node(name: str, **task: Any) -> dict[str, Any]:
    document = manifest(gpu=1)
    document["spec"]["tasks"][0].update(task)
    document["metadata"]["name"] = name
    return document


def test_a_container_executor_places_by_node_selector_and_required_affinity(
    platform: Platform, clock: ManualClock
) -> None:
    """The pods carry them, and a kubelet refuses a pod bound to a node they do not match."""
    pinned = submit_to_platform(
        platform, on_node("pinned", nodeSelector={"kubernetes.io/hostname": "node-2"})
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["x"]}]},
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": ["node-1"],
                            }
                        ]
                    },
                ]
            }
        }
    }
    clock.advance(1)
    steered = submit_to_platform(platform, on_node("steered", affinity=affinity))
    clock.advance(1)
    with pytest.raises(InvalidInput) as refused:  # no node could ever hold it
        submit_to_platform(platform, on_node("nowhere", nodeSelector={"gpu.product": "B200"}))
    assert [p.field for p in refused.value.problems] == ["spec.tasks[0].nodeSelector"]
    assert "no node matches" in refused.value.problems[0].message
    platform.loop.run_once()
    assert [r.node for r in replica_rows(platform, pinned)] == ["node-2"]
    assert [r.node for r in replica_rows(platform, steered)] == ["node-1"]


def test_the_local_executor_ignores_node_constraints_as_it_warns(
    tmp_path: Path, db_url: str, clock: ManualClock, executor: FakeExecutor
) -> None:
    processes = FakeExecutor(  # no Capability.CONTAINERS, as the local executor
        executor.nodes(), clock=clock, capabilities=frozenset({Capability.TORCHRUN})
    )
    local = build_platform(home=tmp_path / "home", db_url=db_url, executor=processes, clock=clock)
    try:
        job_id = submit_to_platform(local, on_node("any", nodeSelector={"gpu.product": "B200"}))
        local.loop.run_once()
        assert state(local, job_id) == "Running"
    finally:
        local.close()
