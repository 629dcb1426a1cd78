"""``kiban bench api``: the report's shape and its internal consistency (never its speed)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest
from rich.console import Console

from kiban.bench.api_burst import ApiBenchOptions, BurstResult, api_table, summarize

KEYS = {"requests", "answered_2xx", "answered_503", "unanswered", "p99_s", "healthz_p99_ms"}


def test_a_summary_counts_every_request_once() -> None:
    result = BurstResult(
        answers=[("list", 200, 0.5), ("follow", 503, 0.1), ("list", None, 30.0), ("list", 500, 1)],
        healthz_s=[0.01, 0.02, 0.2],
        scheduled_in_s=1.5,
    )
    report = summarize(result, [0.001, 0.002], ApiBenchOptions(burst=4, give_up_s=30))
    assert report["requests"] == 4
    assert (report["answered_2xx"], report["answered_503"]) == (1, 1)
    assert (report["answered_other"], report["unanswered"]) == (1, 1)
    assert report["max_s"] == 30.0  # the unanswered one counts as waited until given up
    assert report["healthz_p99_ms"] == 200.0 and report["healthz_idle_p99_ms"] == 2.0
    assert report["goals_met"] == {"answered_within_s": False, "healthz_p99_ms": False}


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="burst"):
        ApiBenchOptions(burst=1)


@pytest.mark.e2e
def test_tiny_run() -> None:
    """A burst of 20 through the CLI: one JSON object on one line, a table on stderr."""
    command = [sys.executable, "-m", "kiban.cli.main", "bench", "api", "--burst", "20", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    report: dict[str, Any] = json.loads(lines[0])
    assert set(report) >= KEYS | {"machine", "goals", "goals_met", "settings"}
    assert report["requests"] == 20
    counted = report["answered_2xx"] + report["answered_503"] + report["unanswered"]
    assert counted + report["answered_other"] == 20
    assert report["unanswered"] == 0 and report["answered_other"] == 0
    assert report["by_kind"]["list"]["2xx"] >= 1 and report["by_kind"]["follow"]["2xx"] >= 1
    assert report["scheduled_in_s"] is not None
    assert report["machine"]["cores"] >= 1
    assert "kiban bench api" in done.stderr
    shown = io.StringIO()
    Console(file=shown, width=160).print(api_table(report))  # rendered from the JSON alone
    assert "/healthz p99 meanwhile" in shown.getvalue()
