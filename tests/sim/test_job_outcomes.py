"""Every job's outcome as a CSV row (``kiban sim --jobs-csv``): hand-computed on a tiny trace."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from tests.sim.sim_support import replay, write_csv

from kiban.sim.job_outcomes import COLUMNS, write_job_outcomes


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_rows_hold_each_jobs_wait_and_completion(tmp_path: Path) -> None:
    # One GPU: a runs 0-10; b, submitted at 5, waits for it and runs 10-30.
    trace = write_csv(tmp_path / "t.csv", ["0,10,1,a,,,,", "5,20,1,b,,,,"])
    report = replay(trace, "fifo")
    outcome = report.results[0].outcome
    assert outcome is not None
    out = tmp_path / "jobs.csv"
    assert write_job_outcomes([("fifo", outcome)], out) == 2
    rows = {r["tenant"]: r for r in _read(out)}
    assert tuple(rows["a"]) == COLUMNS
    assert (rows["a"]["submitted_s"], rows["a"]["first_start_s"], rows["a"]["jct_s"]) == (
        "0.0",
        "0.0",
        "10.0",
    )
    b = rows["b"]
    assert (b["submitted_s"], b["first_start_s"], b["finished_s"]) == ("5.0", "10.0", "30.0")
    assert (b["jct_s"], b["queueing_s"], b["preemptions"], b["killed"]) == (
        "25.0",
        "5.0",
        "0",
        "no",
    )
    assert not list(tmp_path.glob(".*partial"))  # the sibling it wrote first is gone


def test_the_cli_writes_a_row_per_job_and_policy_and_refuses_a_folder(tmp_path: Path) -> None:
    trace = write_csv(tmp_path / "t.csv", ["0,10,1,a,,,,", "5,20,1,b,,,,", "6,1,1,b,,,,"])
    base = [sys.executable, "-m", "kiban.cli.main", "sim", "--trace", str(trace), "--nodes", "1"]
    base += ["--gpus-per-node", "1", "--no-rho"]

    def sim(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], capture_output=True, text=True, timeout=240, check=False
        )

    out = tmp_path / "out" / "jobs.csv"
    done = sim("--compare", "fifo,sjf", "--jobs-csv", str(out))
    assert done.returncode == 0, done.stderr
    rows = _read(out)
    assert [r["policy"] for r in rows] == ["fifo"] * 3 + ["sjf"] * 3
    # sjf starts the 1-second job before the 20-second one; fifo does not
    first_start = {(r["policy"], r["duration_s"]): float(r["first_start_s"]) for r in rows}
    assert first_start[("sjf", "1.0")] < first_start[("sjf", "20.0")]
    assert first_start[("fifo", "1.0")] > first_start[("fifo", "20.0")]
    refused = sim("--jobs-csv", str(tmp_path))
    assert refused.returncode == 2
    assert "--jobs-csv must name a file" in refused.stderr
    assert "Traceback" not in refused.stderr
