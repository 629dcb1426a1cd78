"""Job arrays and dependencies on the local executor: a real ``kiban up``, real processes, the
real CLI."""

from __future__ import annotations

import json
import textwrap

import pytest
from e2e_support import KibanServer

pytestmark = pytest.mark.e2e

INDEX_JOB = """
import json, os, sys, time
array, index = os.environ["KIBAN_ARRAY_JOB_ID"], os.environ["KIBAN_ARRAY_INDEX"]
if os.environ["KIBAN_JOB_ID"] != f"{array}-{index}":
    sys.exit(f"KIBAN_JOB_ID {os.environ['KIBAN_JOB_ID']} is not {array}-{index}")
started = time.time()
time.sleep(0.6)
print("SPAN " + json.dumps([array, int(index), started, time.time()]), flush=True)
"""


def span(server: KibanServer, job_id: str) -> list[object]:
    """What the index job printed: its array, its index, when it started and ended."""
    [line] = [x for x in server.log_text(job_id).splitlines() if x.startswith("SPAN ")]
    found: list[object] = json.loads(line.removeprefix("SPAN "))
    return found


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one time."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_an_array_runs_each_index_with_its_environment_at_most_parallelism_at_once(
    kiban: KibanServer,
) -> None:
    (kiban.workdir / "index_job.py").write_text(textwrap.dedent(INDEX_JOB).lstrip())
    array_id = kiban.run_job(
        "python", "index_job.py", options=["--name", "sweep", "--array", "0-5%2"]
    )
    done = kiban.cli("wait", array_id, timeout=120)
    assert done.returncode == 0, f"{done.stderr}\n{kiban.log_text(f'{array_id}-0')}"
    assert "6 Succeeded" in done.stderr
    marks = [span(kiban, f"{array_id}-{index}") for index in range(6)]
    assert sorted(m[1] for m in marks) == [0, 1, 2, 3, 4, 5]
    assert {m[0] for m in marks} == {array_id}
    assert most_at_once([(float(m[2]), float(m[3])) for m in marks]) <= 2  # type: ignore[arg-type]
    described = kiban.json("describe", array_id)
    assert described["indicesByState"] == {"Succeeded": "0-5"}
    listed = kiban.ok("ls")
    assert sum(1 for line in listed.splitlines() if line.startswith(array_id)) == 1


def test_a_dependency_chain_and_one_never_satisfied(kiban: KibanServer) -> None:
    go = kiban.workdir / "go"  # the first job ends once the test has looked at the others
    wait_for_go = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"
    first = kiban.run_job("python", "-c", wait_for_go, options=["--name", "a"])
    second = kiban.run_job("true", options=["--name", "b", "--after", first])
    third = kiban.run_job("false", options=["--name", "c", "--after", f"{second}:ok"])
    last = kiban.run_job("true", options=["--name", "d", "--after", f"{third}:any"])
    never = kiban.run_job("true", options=["--name", "e", "--after", f"{first}:notok"])
    waiting = kiban.job(second)
    assert waiting["reason"]["code"] == "WaitingForDependency"
    assert first in waiting["reason"]["message"]
    assert kiban.job(last)["reason"]["message"] == f"waits for job {third} to end"
    go.write_text("")

    ended = kiban.wait_for_state(last, "Succeeded", timeout=60)
    jobs = {job_id: kiban.job(job_id) for job_id in (first, second, third)}
    assert [j["state"] for j in jobs.values()] == ["Succeeded", "Succeeded", "Failed"]
    assert jobs[second]["startedAt"] >= jobs[first]["finishedAt"]
    assert jobs[third]["startedAt"] >= jobs[second]["finishedAt"]
    assert ended["startedAt"] >= jobs[third]["finishedAt"]
    refused = kiban.wait_for_state(never, "Failed", timeout=30)
    assert refused["message"] == (
        f"dependency never satisfied: job {first} ended Succeeded, and it was to end "
        "without succeeding"
    )
    assert kiban.cli("wait", never).returncode == 1
