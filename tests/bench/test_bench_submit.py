"""``kiban bench submit``: the report's shape and its internal consistency (never its speed)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from bench_support import TEST_MACHINE, rendered

from kiban.bench.report import report_table
from kiban.bench.submit import STORES
from kiban.stats import percentile

ENTRY_KEYS = {
    "submissions_per_s",
    "p50_ms",
    "p99_ms",
    "submit_to_running_p50_ms",
    "submit_to_running_p99_ms",
    "achieved_rate_per_s",
    "saturated_p50_ms",
    "saturated_p99_ms",
    "server_cpu_ms_per_submission",
    "client_cpu_ms_per_submission",
    "paced_submissions",
    "saturated_submissions",
    "warmup_submissions",
    "jobs_in_store",
    "running_jobs",
    "errors",
    "goals_met",
}


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([3.0], 99) == 3.0
    assert math.isnan(percentile([], 50))


@pytest.mark.e2e
def test_tiny_run_on_sqlite() -> None:
    """Four clients, a few jobs, SQLite only, through the CLI: one JSON object on one line."""
    command = [
        sys.executable,
        "-m",
        "kiban.cli.main",
        "bench",
        "submit",
        "--store",
        "sqlite",
        "--jobs",
        "24",
        "--clients",
        "4",
        "--running-jobs",
        "3",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    report: dict[str, Any] = json.loads(lines[0])

    assert set(report) == {"sqlite", "goals", "settings", "machine"}
    assert report["settings"]["clients"] == 4
    assert report["machine"]["cores"] >= 1
    assert report["machine"]["cpu_model"]
    assert report["machine"]["python"].split()[-1] == ".".join(map(str, sys.version_info[:3]))

    entry = report["sqlite"]
    assert set(entry) >= ENTRY_KEYS
    assert entry["errors"] == 0
    for key in ("submissions_per_s", "achieved_rate_per_s", "server_cpu_ms_per_submission"):
        assert entry[key] > 0, key
    for prefix in ("", "saturated_", "submit_to_running_"):
        p50, p99 = entry[f"{prefix}p50_ms"], entry[f"{prefix}p99_ms"]
        assert 0 < p50 <= p99, prefix
    # Every submission answered 201 is a job in the store, and nothing more.
    assert entry["paced_submissions"] == 24
    assert entry["saturated_submissions"] == 24
    assert entry["warmup_submissions"] == 2 * 4
    assert entry["jobs_in_store"] == 24 + 24 + 8
    assert entry["running_jobs"] == 3
    assert set(entry["goals_met"]) == set(report["goals"])
    # The audit comparison: each audited server's log holds its cordon, its warm-ups and its
    # submissions, chains intact; the servers without one answered as many.
    assert entry["audit_records"] == 2 * (1 + 4 + 24)
    assert entry["audit_intact"] is True
    assert entry["audit_errors"] == 0
    assert entry["audit_ratio"] > 0
    assert len(entry["audit_on_runs_per_s"]) == len(entry["audit_off_runs_per_s"]) == 2
    assert all(isinstance(v, bool) for v in entry["goals_met"].values())
    # The readable table went to stderr, with the machine it ran on.
    assert "submissions/s" in done.stderr
    assert report["machine"]["cpu_model"] in done.stderr


def test_table_shows_stores_side_by_side_and_skips() -> None:
    entry: dict[str, Any] = dict.fromkeys(ENTRY_KEYS - {"goals_met"}, 1.0)
    entry.update(
        submissions_per_s=600.0,
        p99_ms=60.0,
        submit_to_running_p99_ms=100.0,
        latency_is_lower_bound=False,
        db_cpu_ms_per_submission=None,
        first_error=None,
        goals_met={"submissions_per_s": True, "p99_ms": False, "submit_to_running_p99_ms": True},
    )
    report = {
        "sqlite": entry,
        "postgresql": {"skipped": "PostgreSQL server binaries not found"},
        "goals": {},
        "settings": {"clients": 32, "offered_rate_per_s": 500.0},
        "machine": TEST_MACHINE,
    }
    text = rendered(report_table(report))
    assert all(store in text for store in STORES)
    assert "600.0 ✓" in text
    assert "60.0 ms ✗" in text
    assert "skipped" in text
    assert "Test CPU, 2 cores" in text


def test_table_shows_the_audit_comparison() -> None:
    entry: dict[str, Any] = dict.fromkeys(ENTRY_KEYS - {"goals_met"}, 1.0)
    entry.update(
        latency_is_lower_bound=False,
        db_cpu_ms_per_submission=None,
        first_error=None,
        audit_on_submissions_per_s=570.0,
        audit_off_submissions_per_s=600.0,
        audit_ratio=0.95,
        audit_records=12345,
        audit_server_cpu_ms_on=2.5,
        audit_server_cpu_ms_off=2.25,
        audit_intact=True,
        goals_met={"audit_ratio": True},
    )
    report = {
        "sqlite": entry,
        "goals": {},
        "settings": {"clients": 32, "offered_rate_per_s": 500.0, "audit_compare": True},
        "machine": TEST_MACHINE,
    }
    text = rendered(report_table(report))
    assert "570.0/s" in text and "600.0/s" in text
    assert "0.95 ✓" in text
    assert "12,345, intact" in text
    assert "2.50 / 2.25 ms" in text
    report["settings"]["audit_compare"] = False  # type: ignore[index]
    assert "audit ratio" not in rendered(report_table(report))


SUSTAINED_KEYS = {
    "submissions_per_s",
    "p50_ms",
    "p99_ms",
    "submitted",
    "errors",
    "first_error",
    "pending_before",
    "pending_after",
    "stored_all",
    "server_cpu_ms_per_submission",
}


@pytest.mark.e2e
def test_sustained_run_with_a_backlog_and_without() -> None:
    """Two client counts, a small backlog, SQLite, through the CLI: the issue's JSON keys, and
    every 201 a job in the store on top of the backlog."""
    command = [
        sys.executable,
        "-m",
        "kiban.cli.main",
        "bench",
        "submit",
        "--sustained",
        "2",
        "--clients",
        "2,4",
        "--pending",
        "3000",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    report: dict[str, Any] = json.loads(lines[0])

    assert report["store"] == "sqlite"
    for part, backlog in (("sustained", 3000), ("empty_backlog", 0)):
        assert set(report[part]) == {"2", "4"}
        for clients, entry in report[part].items():
            assert set(entry) == SUSTAINED_KEYS, (part, clients)
            assert entry["errors"] == 0 and entry["stored_all"], entry
            assert entry["submitted"] > 0 and entry["submissions_per_s"] > 0
            assert 0 < entry["p50_ms"] <= entry["p99_ms"]
            assert entry["pending_before"] == backlog
            # each client's warm-up submission, then the measured ones
            assert entry["pending_after"] == backlog + int(clients) + entry["submitted"]
    assert set(report["slowdown"]) == {"2", "4"}
    assert set(report["goals_met"]) == {"submissions_per_s", "p99_ms", "slowdown", "no_errors"}
    assert report["machine"]["cores"] >= 1
    assert "slowdown" in done.stderr and report["machine"]["cpu_model"] in done.stderr


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--sustained", "5", "--clients", "4,x"], "--clients must be a number or numbers"),
        (["--sustained", "5", "--clients", "4,0"], "--clients must be positive"),
        (["--sustained", "5", "--clients", "4,4"], "--clients names a client count twice"),
        (["--sustained", "0"], "--sustained must be a positive number of seconds"),
        (["--sustained", "5", "--pending", "0"], "--pending must be at least 1"),
        (["--sustained", "5", "--store", "sqlite", "--store", "postgresql"], "give --store once"),
        (["--clients", "4,16"], "--clients takes one number unless --sustained is given"),
    ],
)
def test_bad_options_are_refused_naming_them(arguments: list[str], says: str) -> None:
    command = [sys.executable, "-m", "kiban.cli.main", "bench", "submit", *arguments]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert says in done.stderr
    assert "Traceback" not in done.stderr
