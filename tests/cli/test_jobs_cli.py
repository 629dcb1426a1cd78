"""``kiban ls``, ``describe`` and ``checkpoint``: reasons, positions, forecasts, standings.

The CLI runs in-process against the app (see conftest.py); jobs are scheduled by real passes
of the control loop over the fake executor (3 nodes x 2 GPUs) and a manual clock, which the
CLI's "now" follows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from cli_support import Run, one_error_line

from kiban.cli import render
from kiban.platform import Platform
from kiban.testing import FakeExecutor, ManualClock

HOUR = 3600.0


@dataclass
class Jobs:
    big: str  # all 6 GPUs, maxRuntime 1h, running for half an hour
    waiting: str  # 2 GPUs, first in line: starts when big ends
    later: str  # 1 GPU, second in line


@pytest.fixture
def jobs(
    kiban: Run, platform: Platform, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> Jobs:
    monkeypatch.setattr(render, "current_time", clock.now)

    def run(*args: str) -> str:
        done = kiban("run", *args, "--", "train")
        assert done.code == 0, done.err
        return done.out.strip()

    big = run("--name", "big", "--nodes", "3", "--gpus", "2", "--max-runtime", "1h")
    platform.loop.run_once()
    platform.loop.run_once()
    clock.advance(HOUR / 2)
    waiting = run("--name", "waiting", "--gpus", "2")
    clock.advance(1)
    later = run("--name", "later", "--gpus", "1")
    platform.loop.run_once()
    return Jobs(big, waiting, later)


def columns(out: str) -> tuple[list[str], dict[str, str]]:
    """The header's column names, and each row's text by job id (whitespace collapsed)."""
    lines = out.strip().splitlines()
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in lines[1:]}
    return lines[0].split(), rows


def test_ls_shows_reason_and_eta_of_waiting_jobs_only(kiban: Run, jobs: Jobs) -> None:
    done = kiban("ls")
    assert done.code == 0, done.err
    header, rows = columns(done.out)
    assert header[-2:] == ["REASON", "ETA"]
    # Running: no reason, no ETA; waiting: the reason, its place, and when it should start.
    assert rows[jobs.big] == "default Running 3 6 30m01s 30m01s"
    assert rows[jobs.waiting].endswith("WaitingForReservation (#1 in queue) in 30m")
    # BestEffortFIFO (the default queue's): a reservation of its own, behind the first
    assert rows[jobs.later].endswith("WaitingForReservation (#2 in queue) in 30m")

    listed = {j["id"]: j for j in json.loads(kiban("ls", "-o", "json").out)}
    assert listed[jobs.waiting]["eta"] == listed[jobs.later]["eta"]
    assert (listed[jobs.waiting]["clusterPosition"], listed[jobs.big]["eta"]) == (1, None)


@pytest.mark.parametrize(
    ("job", "now", "shown"),
    [
        ({"state": "Running", "eta": 100.0}, 0.0, ""),
        ({"state": "Pending", "eta": None}, 0.0, "-"),
        ({"state": "Pending", "eta": 100.0}, 100.5, "now"),
        ({"state": "Pending", "eta": 100.0}, 200.0, "now"),  # the forecast time has passed
        ({"state": "Pending", "eta": 145.0}, 100.0, "in 45s"),
        ({"state": "Pending", "eta": 100.0 + 12 * 60 + 20}, 100.0, "in 12m"),
        ({"state": "Pending", "eta": 100.0 + 3 * HOUR + 300}, 100.0, "in 3h05m"),
        ({"state": "Pending", "eta": 100.0 + 50 * HOUR}, 100.0, "in 2d02h"),
        ({"state": "Pending", "eta": 145.0, "etaEstimated": True}, 100.0, "in ~45s"),
        ({"state": "Pending", "eta": 145.0, "etaEstimated": False}, 100.0, "in 45s"),
    ],
)
def test_eta_cell(job: dict[str, object], now: float, shown: str) -> None:
    assert render.eta(job, now) == shown


def test_describe_says_where_a_job_stands_and_when_it_should_start(
    kiban: Run, jobs: Jobs, clock: ManualClock
) -> None:
    done = kiban("describe", jobs.later)
    assert done.code == 0, done.err
    lines = {line.split()[0]: " ".join(line.split()[1:]) for line in done.out.splitlines()}
    assert lines["Waiting"].startswith("WaitingForReservation: needs 1 GPU together; reserved")
    assert lines["Position"] == "#2 in queue default, #2 in the cluster"
    start = render.when(clock.now() - 1 + HOUR / 2)
    assert lines["Starts"] == f"in 30m (about {start}; forecast)"
    # 6 GPUs for half an hour: about 3 GPU-hours of decayed usage, weight 1.
    assert lines["Standing"].startswith("3.0 GPU-hours per unit of weight (tenant default's")
    assert "Preempted" not in lines and "Checkpoint" not in lines

    running = kiban("describe", jobs.big).out
    assert "Checkpoint none reported" in " ".join(running.split())
    assert "Position" not in running and "Starts" not in running

    described = json.loads(kiban("describe", jobs.later, "-o", "json").out)
    assert described["clusterPosition"] == 2
    assert described["eta"] == pytest.approx(clock.now() - 1 + HOUR / 2, abs=2)
    assert described["standing"] == pytest.approx(3 * HOUR, rel=0.01)


def test_describe_says_what_a_running_replica_waits_for(
    kiban: Run, jobs: Jobs, platform: Platform, executor: FakeExecutor
) -> None:
    executor.running(jobs.big)[1].waiting = "waiting for its image: ErrImagePull: not found"
    platform.loop.run_once()
    running = kiban("describe", jobs.big).out
    assert "rank 1 is waiting for its image: ErrImagePull: not found" in running
    assert "rank 0 is" not in running


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "-"),
        (0.0, "0.0"),
        (20.5, "0.0057"),
        (170.0, "0.047"),
        (180.0, "0.1"),
        (4.5 * HOUR, "4.5"),
    ],
)
def test_gpu_hours(seconds: float | None, shown: str) -> None:
    assert render.gpu_hours(seconds) == shown


def test_describe_without_a_forecast_says_so() -> None:
    job = {"state": "Pending", "queue": "q", "tenant": "t", "queuePosition": 1, "eta": None}
    assert dict(render.waiting_lines(job, now=0.0))["Starts"].startswith("no estimate")


def test_checkpoint_of_a_running_job_is_recorded_and_described(
    kiban: Run, jobs: Jobs, clock: ManualClock
) -> None:
    clock.advance(60)
    done = kiban("checkpoint", jobs.big)
    assert (done.code, done.out) == (0, "")
    assert f"job {jobs.big}: checkpoint recorded at {render.when(clock.now())}" in done.err
    clock.advance(90)
    described = " ".join(kiban("describe", jobs.big).out.split())
    assert f"Checkpoint {render.when(clock.now() - 90)} (1m30s ago)" in described
    assert "Checkpointed checkpoint reported by admin" in described  # the event


def test_checkpoint_inside_a_job_needs_no_id(
    kiban: Run, jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIBAN_JOB_ID", jobs.big)
    done = kiban("checkpoint")
    assert done.code == 0, done.err
    assert f"job {jobs.big}: checkpoint recorded" in done.err


def test_checkpoint_errors_are_one_line(
    kiban: Run, run_as: Callable[[str], Run], jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KIBAN_JOB_ID", raising=False)
    one_error_line(kiban("checkpoint"), "which job?", "KIBAN_JOB_ID")
    one_error_line(kiban("checkpoint", jobs.waiting), "is Pending", "only a running job can report")
    one_error_line(kiban("checkpoint", "no-such-job"), "job no-such-job not found")
    assert kiban("admin", "create-tenant", "speech").code == 0
    bob = run_as(kiban("admin", "create-token", "speech", "bob").out.strip())
    one_error_line(bob("checkpoint", jobs.big), f"job {jobs.big} not found")


@pytest.mark.parametrize("command", ["wait", "describe", "cancel", "logs"])
def test_an_empty_job_id_is_one_error_line(kiban: Run, jobs: Jobs, command: str) -> None:
    # Unchecked, "" made the path /api/v1/jobs/, which addresses the list: `kiban wait ""`
    # (a script whose submit failed) ended in a traceback.
    one_error_line(kiban(command, ""), "job id: must not be empty")


def test_a_job_id_with_a_slash_is_refused(kiban: Run, jobs: Jobs) -> None:
    # The server decodes %2F before routing: "x/cancel" must not reach x's cancel route.
    one_error_line(kiban("cancel", f"{jobs.waiting}/cancel"), "job id:", "holds a '/'")
    assert "Pending" in kiban("describe", jobs.waiting).out
