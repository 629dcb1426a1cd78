"""``kiban bench submit --array``: the report's shape and consistency (never its speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest


@pytest.mark.e2e
def test_tiny_array_run_on_sqlite() -> None:
    command = [
        *(sys.executable, "-m", "kiban.cli.main", "bench", "submit"),
        *("--array", "40", "--scheduled", "5", "--clients", "4", "--json"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.strip().splitlines()
    report: dict[str, Any] = json.loads(line)
    assert set(report) == {"sqlite", "settings", "machine"}
    assert report["settings"] == {"array": 40, "scheduled": 5, "clients": 4}
    entry = report["sqlite"]
    for way in ("array", "single"):
        assert entry[way]["accept_s"] > 0
        assert entry[way]["first_scheduled_s"] > 0
    ratio = entry["single"]["accept_s"] / entry["array"]["accept_s"]
    assert entry["accept_speedup"] == pytest.approx(ratio, abs=0.06)
    assert "first 5 scheduled" in done.stderr
    assert report["machine"]["cpu_model"] in done.stderr


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--array", "0"], "--array must be at least 1"),
        (["--array", "10", "--scheduled", "11"], "--scheduled must be between 1 and --array"),
        (["--array", "10", "--clients", "4,8"], "--clients takes one number with --array"),
    ],
)
def test_bad_array_options_are_refused_naming_them(arguments: list[str], says: str) -> None:
    command = [sys.executable, "-m", "kiban.cli.main", "bench", "submit", *arguments]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert says in done.stderr
    assert "Traceback" not in done.stderr
