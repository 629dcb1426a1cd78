"""``kiban run --array/--after``, and ``ls``, ``describe``, ``wait``, ``cancel`` of an array.

In-process against the app (conftest.py), scheduled by real passes over the fake executor
(3 nodes x 2 GPUs)."""

from __future__ import annotations

import json

import pytest
from cli_support import Run

from kiban.platform import Platform
from kiban.testing import FakeExecutor


def run(kiban: Run, *args: str) -> str:
    done = kiban("run", *args, "--", "train")
    assert done.code == 0, done.err
    return done.out.strip()


def test_run_array_submits_one_job_per_index_and_ls_folds_them(
    kiban: Run, platform: Platform
) -> None:
    array_id = run(kiban, "--name", "sweep", "--gpus", "1", "--array", "0-9%2")
    single = run(kiban, "--name", "single")
    platform.loop.run_once()
    platform.loop.run_once()
    listed = kiban("ls")
    assert listed.code == 0, listed.err
    lines = [line for line in listed.out.splitlines()[1:] if line.strip()]
    assert len(lines) == 2  # the single job and one line for the ten indices
    [folded] = [line for line in lines if line.startswith(array_id)]
    assert "2 Running, 8 Pending" in folded
    assert "array 0-9%2" in folded
    assert any(line.startswith(single) for line in lines)
    described = kiban("describe", array_id)
    assert described.code == 0, described.err
    assert "2 Running, 8 Pending" in described.out
    assert "Running" in described.out and "0-1" in described.out
    assert "8 for ArraySlot" in described.out
    as_json = json.loads(kiban("describe", array_id, "-o", "json").out)
    assert as_json["indicesByState"] == {"Running": "0-1", "Pending": "2-9"}
    index = json.loads(kiban("describe", f"{array_id}-3", "-o", "json").out)
    assert index["reason"]["code"] == "WaitingForArraySlot"


def test_submitting_an_array_says_what_its_jobs_are(kiban: Run) -> None:
    done = kiban("run", "--array", "1,3,5-7%2", "--", "train")
    assert done.code == 0, done.err
    array_id = done.out.strip()
    assert f"5 jobs {array_id}-<index> for indices 1,3,5-7, at most 2 at once" in done.err


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--array", "0-9%0", "at least 1"),
        ("--array", "%4", "not INDICES[%PARALLELISM]"),
        ("--after", "x:sometimes", "not ok, notok or any"),
        ("--after", ":ok", "names no job"),
    ],
)
def test_bad_array_and_after_options_are_one_error(
    kiban: Run, option: str, value: str, says: str
) -> None:
    done = kiban("run", option, value, "--", "train")
    assert done.code != 0
    assert says in done.err
    assert json.loads(kiban("ls", "-o", "json").out) == []


def test_wait_for_an_array_exits_0_only_if_every_index_succeeded(
    kiban: Run, platform: Platform, executor: FakeExecutor
) -> None:
    good = run(kiban, "--array", "0-1")
    bad = run(kiban, "--array", "0-1")
    platform.loop.run_once()
    platform.loop.run_once()
    for job_id in (f"{good}-0", f"{good}-1", f"{bad}-0"):
        executor.finish_all(job_id)
    executor.finish_all(f"{bad}-1", exit_code=2)
    platform.loop.run_once()
    done = kiban("wait", good)
    assert done.code == 0, done.err
    assert "2 Succeeded" in done.err
    done = kiban("wait", bad)
    assert done.code == 1
    assert "1 Succeeded, 1 Failed" in done.err


def test_cancel_an_array_ends_its_indices(kiban: Run, platform: Platform) -> None:
    array_id = run(kiban, "--array", "0-3%1")
    done = kiban("cancel", array_id)
    assert done.code == 0, done.err
    assert "4 Cancelled" in done.err
    assert kiban("cancel", "nosuch-abcdef").code == 1


def test_after_makes_a_job_wait_with_the_reason_naming_the_job(
    kiban: Run, platform: Platform, executor: FakeExecutor
) -> None:
    first = run(kiban, "--name", "first")
    second = run(kiban, "--name", "second", "--after", f"{first}:notok")
    platform.loop.run_once()
    listed = kiban("ls").out
    [line] = [line for line in listed.splitlines() if line.startswith(second)]
    assert "WaitingForDependency" in line
    shown = json.loads(kiban("describe", second, "-o", "json").out)
    assert shown["reason"]["message"] == f"waits for job {first} to end without succeeding"
    missing = kiban("run", "--after", "ghost-zzzzzz", "--", "train")
    assert missing.code != 0
    assert "spec.dependsOn[0].job" in missing.err
