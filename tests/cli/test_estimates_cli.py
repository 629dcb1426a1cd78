"""``kiban describe`` and the job document through the API: the run time estimated from
history for a job with no maxRuntime, and a start time that rests on it."""

from __future__ import annotations

import json

import pytest
from cli_support import Run

from kiban.cli import render
from kiban.platform import Platform
from kiban.testing import FakeExecutor, ManualClock

MINUTE = 60.0


def fields(out: str) -> dict[str, str]:
    return {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines() if line}


def test_describe_shows_the_estimated_run_time_and_the_estimated_start(
    kiban: Run,
    platform: Platform,
    executor: FakeExecutor,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(render, "current_time", clock.now)

    def run(name: str) -> str:
        done = kiban("run", "--name", name, "--nodes", "3", "--gpus", "2", "--", "train")
        assert done.code == 0, done.err
        return done.out.strip()

    for minutes in (10, 20):  # two runs of the same job: its median is 15 minutes
        finished = run("train")
        platform.loop.run_once()
        clock.advance(minutes * MINUTE)
        executor.finish_all(finished, exit_code=0)
        platform.loop.run_once()
    current = run("train")
    platform.loop.run_once()
    clock.advance(5 * MINUTE)
    waiting = run("eval")
    clock.advance(10)  # past the forecast interval
    platform.loop.run_once()

    described = " ".join(kiban("describe", current).out.split())
    assert (
        "Run time about 15m, estimated from user+name+command+gpus (2 runs), confidence 45% "
        "(no maxRuntime: it plans, it never stops the job)"
    ) in described
    lines = fields(kiban("describe", waiting).out)
    assert lines["Starts"].startswith("in ~10m (about ")
    assert lines["Starts"].endswith("; forecast on estimated run times)")

    document = json.loads(kiban("describe", current, "-o", "json").out)
    assert document["estimatedRuntime"] == {
        "seconds": 15 * MINUTE,
        "basis": "user+name+command+gpus (2 runs)",
        "samples": 2,
        "confidence": 0.45,  # 0.9 * 2/3 / (1 + 5/15)
    }
    assert json.loads(kiban("describe", waiting, "-o", "json").out)["etaEstimated"] is True
    listed = {line.split()[0]: line for line in kiban("ls").out.splitlines()[1:]}
    assert listed[waiting].rstrip().endswith("in ~10m")


def test_describe_of_a_job_with_a_max_runtime_shows_no_estimate(
    kiban: Run, platform: Platform
) -> None:
    done = kiban("run", "--name", "bounded", "--gpus", "1", "--max-runtime", "1h", "--", "x")
    assert done.code == 0, done.err
    platform.loop.run_once()
    document = json.loads(kiban("describe", done.out.strip(), "-o", "json").out)
    assert document["estimatedRuntime"] is None
    assert document["etaEstimated"] is False
