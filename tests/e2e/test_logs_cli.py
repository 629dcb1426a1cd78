"""``kiban logs`` against a real server and the local executor: the job's output alone on
stdout, where it ran on stderr, its last lines, its lines since a time, each rank's lines after
``[rank R]`` and each line after its time, and a job that never started says why."""

from __future__ import annotations

import re
import time
from datetime import datetime

import pytest
from e2e_support import KibanServer, eventually

pytestmark = pytest.mark.e2e

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z ")
# each rank prints three lines, waits until told, then prints two more
SCRIPT = (
    'for i in 1 2 3; do echo "rank $RANK line $i"; done; '
    'while [ ! -e "$0" ]; do sleep 0.1; done; '
    'echo "rank $RANK line 4"; printf "rank $RANK line 5"'
)


def test_logs_shows_tails_times_and_ranks(kiban: KibanServer) -> None:
    release = kiban.workdir / "release"
    job_id = kiban.run_job("sh", "-c", SCRIPT, str(release), options=["--nodes", "2"])
    kiban.wait_for_state(job_id, "Running")
    eventually(
        lambda: all(f"rank {r} line 3\n" in kiban.log_text(job_id, r) for r in (0, 1)),
        what="both ranks' first lines",
    )
    between = datetime.now().isoformat(timespec="microseconds")  # local time, as people write it
    time.sleep(0.3)  # a tenth of a second is the times' grain; 0.3 s sets the parts apart
    release.touch()
    kiban.wait_for_state(job_id, "Succeeded")

    whole = kiban.cli("logs", job_id)
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout == "".join(f"rank 0 line {i}\n" for i in (1, 2, 3, 4)) + "rank 0 line 5"
    assert f"=== kiban: job {job_id}, attempt 1: worker[0] rank 0 on node-" in whole.stderr

    assert kiban.ok("logs", job_id, "--rank", "1", "--tail", "2") == "rank 1 line 4\nrank 1 line 5"
    assert kiban.ok("logs", job_id, "--since", between) == "rank 0 line 4\nrank 0 line 5"
    assert kiban.ok("logs", job_id, "--since", "1h").startswith("rank 0 line 1\n")

    timed = kiban.ok("logs", job_id, "--timestamps", "--tail", "3").splitlines()
    assert [STAMP.sub("", line) for line in timed] == [
        "rank 0 line 3",
        "rank 0 line 4",
        "rank 0 line 5",
    ]
    assert all(STAMP.match(line) for line in timed)
    times = [datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")) for line in timed]
    assert times[1] > times[0]  # written apart, timed apart

    both = kiban.ok("logs", job_id, "--all-ranks", "--since", between).splitlines()
    assert both == [
        "[rank 0] rank 0 line 4",
        "[rank 0] rank 0 line 5",
        "[rank 1] rank 1 line 4",
        "[rank 1] rank 1 line 5",
    ]


def test_logs_of_a_job_that_never_started_says_why_and_fails(kiban: KibanServer) -> None:
    for node in ("node-0", "node-1", "node-2"):
        kiban.ok("cordon", node)
    job_id = kiban.run_job("echo", "never")
    kiban.wait_for_state(job_id, "Pending")
    pending = kiban.cli("logs", job_id)
    assert pending.returncode == 1
    assert pending.stdout == ""
    assert f"job {job_id} has not started: it is Pending (NoNodeFits" in pending.stderr

    kiban.ok("cancel", job_id)
    cancelled = kiban.cli("logs", job_id, "-f")
    assert cancelled.returncode == 1
    assert "was cancelled before it started" in cancelled.stderr
