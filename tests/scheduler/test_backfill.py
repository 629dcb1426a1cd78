"""Reservations for blocked gangs and EASY backfill around them."""

from __future__ import annotations

from kiban.scheduler import ReasonCode, Snapshot, schedule
from kiban.testing import JobBuilder, cluster, job, queue, running, snapshot


def base(*pending_jobs: JobBuilder, now: float = 0.0) -> Snapshot:
    return snapshot(
        nodes=cluster().nodes(2, gpus=8),
        queues=[queue("q").best_effort()],
        running=[running("r").queue("q").on("node-0", gpus=8).max_runtime(100)],
        pending=pending_jobs,
        now=now,
    )


def test_blocked_gang_gets_a_reservation_when_running_jobs_end() -> None:
    decisions = schedule(base(job("big").queue("q").replicas(2, gpu=8).submitted(0)))
    (wait,) = decisions.waiting
    assert wait.reason.code is ReasonCode.WAITING_FOR_RESERVATION
    assert wait.reserved_at == 100
    assert wait.reason.details["nodes"] == ["node-0", "node-1"]


def test_small_job_that_ends_before_the_reservation_backfills() -> None:
    decisions = schedule(
        base(
            job("big").queue("q").replicas(2, gpu=8).submitted(0),
            job("short").queue("q").replicas(1, gpu=8).max_runtime(50).submitted(1),
        )
    )
    assert [a.job_id for a in decisions.admitted] == ["short"]


def test_small_job_that_would_delay_the_reservation_waits() -> None:
    decisions = schedule(
        base(
            job("big").queue("q").replicas(2, gpu=8).submitted(0),
            job("long").queue("q").replicas(1, gpu=8).max_runtime(500).submitted(1),
            job("unbounded").queue("q").replicas(1, gpu=8).submitted(2),
        )
    )
    assert decisions.admitted == ()
    codes = {w.job_id: w.reason.code for w in decisions.waiting}
    assert codes["long"] is ReasonCode.BLOCKED_BY_RESERVATION
    assert codes["unbounded"] is ReasonCode.BLOCKED_BY_RESERVATION


def test_job_off_the_reserved_nodes_starts_freely() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(3, gpus=8),
            queues=[queue("q").best_effort()],
            running=[
                running("r").on("node-0", gpus=8).max_runtime(100),
                running("s").on("node-1", gpus=4).max_runtime(1000),
            ],
            pending=[
                job("big").queue("q").replicas(2, gpu=8).submitted(0),
                job("small").queue("q").replicas(1, gpu=4).submitted(1),
            ],
        )
    )
    # big's reservation: node-0 (free at 100) and node-2; node-1 stays open for small.
    assert [a.job_id for a in decisions.admitted] == ["small"]
    assert decisions.admitted[0].placements[0].node == "node-1"


def test_no_reservation_when_running_jobs_have_no_max_runtime() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            running=[running("r").on("node-0", gpus=8)],
            pending=[job("big").replicas(2, gpu=8)],
        )
    )
    assert decisions.waiting[0].reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert decisions.waiting[0].reserved_at is None


def test_blocked_job_is_told_the_reservation_of_its_own_flavor() -> None:
    """Another flavor's earlier reservation is no reason to wait: the message names the job
    whose reservation on this flavor holds the GPUs it would fit on."""
    decisions = schedule(
        snapshot(
            nodes=(
                cluster()
                .nodes(2, gpus=8, prefix="a", flavor="a100")
                .nodes(2, gpus=8, prefix="h", flavor="h100")
            ),
            queues=[
                queue("qa").nominal("a100", 24).best_effort(),
                queue("qh").nominal("h100", 24).best_effort(),
            ],
            running=[
                running("ra").queue("qa").on("a-0", gpus=8).max_runtime(50),
                running("rh").queue("qh").on("h-0", gpus=8).max_runtime(200),
            ],
            pending=[
                job("big-a").queue("qa").replicas(2, gpu=8).submitted(0),
                job("big-h").queue("qh").replicas(2, gpu=8).submitted(1),
                job("small").queue("qh").replicas(1, gpu=8).submitted(2),
            ],
        )
    )
    waits = {w.job_id: w for w in decisions.waiting}
    assert waits["big-a"].reserved_at == 50
    assert waits["big-h"].reserved_at == 200
    small = waits["small"].reason
    assert small.code is ReasonCode.BLOCKED_BY_RESERVATION
    assert small.details["flavor"] == "h100"
    assert small.details["reservation_job"] == "big-h"
    assert small.details["reserved_at"] == 200
    assert "reserved for job big-h" in small.message


def test_the_probe_of_a_blocked_job_gives_its_capacity_back() -> None:
    """A job told it would fit but for a reservation took nothing: a later job that ends before
    the reservation backfills onto the same GPUs."""
    decisions = schedule(
        base(
            job("big").queue("q").replicas(2, gpu=8).submitted(0),
            job("unbounded").queue("q").replicas(1, gpu=8).submitted(1),
            job("short").queue("q").replicas(1, gpu=8).max_runtime(50).submitted(2),
        )
    )
    codes = {w.job_id: w.reason.code for w in decisions.waiting}
    assert codes["unbounded"] is ReasonCode.BLOCKED_BY_RESERVATION
    assert [(a.job_id, a.placements[0].node) for a in decisions.admitted] == [("short", "node-1")]
