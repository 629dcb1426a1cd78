"""Usage records stay true across a kill -9 of the server (real server, local executor): an
attempt running when it died is re-adopted and closed once when it ends, one that ended while
it was down is closed when settled after the restart; ``kiban usage`` counts each attempt once."""

from __future__ import annotations

import textwrap

import pytest
from e2e_support import KibanServer, eventually, job_processes

pytestmark = pytest.mark.e2e

EXIT_WHEN_RELEASED = """
import pathlib, sys, time
release = pathlib.Path(sys.argv[1])
print("waiting", flush=True)
while not release.exists():
    time.sleep(0.1)
"""


def test_usage_is_counted_once_across_a_kill_9(kiban: KibanServer) -> None:
    (kiban.workdir / "wait.py").write_text(textwrap.dedent(EXIT_WHEN_RELEASED).lstrip())
    across, during = kiban.workdir / "across", kiban.workdir / "during"
    runs_across = kiban.run_job("python", "wait.py", str(across), options=["--gpus", "2"])
    ends_during = kiban.run_job("python", "wait.py", str(during), options=["--gpus", "1"])
    done_before = kiban.run_job("true", options=["--gpus", "1"])
    kiban.wait_for_state(done_before, "Succeeded")
    for job_id in (runs_across, ends_during):
        kiban.wait_for_state(job_id, "Running")
        eventually(lambda j=job_id: "waiting" in kiban.log_text(j), what="the replica to start")

    kiban.kill()
    during.touch()  # this one ends while the server is down
    eventually(lambda: not job_processes(ends_during), what="the replica to end")
    kiban.start()
    kiban.wait_for_state(ends_during, "Succeeded")
    assert kiban.job(runs_across)["state"] == "Running"  # re-adopted
    across.touch()
    kiban.wait_for_state(runs_across, "Succeeded")

    report = kiban.json("usage", "--by", "job", "--since", "1h")
    rows = {row["key"]: row for row in report["rows"]}
    assert set(rows) == {runs_across, ends_during, done_before}
    for job_id, gpus in ((runs_across, 2), (ends_during, 1), (done_before, 1)):
        job = kiban.job(job_id)
        # One attempt each, held from its admission to the settling of its end.
        assert (rows[job_id]["attempts"], rows[job_id]["jobs"]) == (1, 1), rows[job_id]
        held = job["finishedAt"] - job["admittedAt"]
        assert rows[job_id]["gpuHours"] == pytest.approx(gpus * held / 3600, rel=1e-6)
    assert rows[runs_across]["preemptedGpuHours"] == rows[runs_across]["nodeLostGpuHours"] == 0
    text = kiban.ok("usage", "--by", "user", "--since", "1h", "-o", "csv")
    assert text.splitlines()[0].startswith("tenant,key,periodStart,gpuHours")
    assert len(text.splitlines()) == 2  # one member submitted them all
