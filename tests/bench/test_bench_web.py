"""``kiban bench web``: the options, the table drawn from a report alone, and a small real run
whose every figure must have been measured (never its speed)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_support import TEST_MACHINE, rendered

from kiban.bench.web import WebBenchOptions, summary_ms, web_table

ASSETS = Path(__file__).resolve().parents[2] / "src" / "kiban" / "web" / "assets"


def sample_report(kernel: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "jobs": 200,
        "listed_total": 200,
        "fill_s": 1.5,
        "ttfb": {"p50_ms": 1.2, "p99_ms": 3.4, "samples": 5},
        "render": {"p50_ms": 180.0, "p99_ms": 260.0, "samples": 3},
        "dom_content_loaded": {"p50_ms": 90.0, "p99_ms": 120.0, "samples": 3},
        "browser": "Chromium 156.0",
        "list_api": {"p50_ms": 4.5, "p99_ms": 9.0, "samples": 20, "page_rows": 50},
        "kernel": kernel,
        "goals_met": {
            "render_p50_ms": True,
            "route_added_p50_ms": None if kernel is None else False,
        },
        "settings": {"page_size": 50, "loads": 3},
        "machine": TEST_MACHINE,
    }


def test_options_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="jobs must be at least 50"):
        WebBenchOptions(jobs=10)
    with pytest.raises(ValueError, match="kernel-samples must be at least 1"):
        WebBenchOptions(kernel_samples=0)


def test_summary_is_in_milliseconds_by_nearest_rank() -> None:
    summary = summary_ms([0.001 * n for n in range(1, 101)])
    assert summary == {"p50_ms": 50.0, "p99_ms": 99.0, "samples": 100}


def test_the_table_shows_the_route_against_its_goal_and_the_machine() -> None:
    kernel = {
        "route": {"p50_ms": 4.0, "p99_ms": 7.0, "samples": 10},
        "direct": {"p50_ms": 2.5, "p99_ms": 6.0, "samples": 10},
        "added_p50_ms": 1.5,
        "added_p99_ms": 1.0,
        "ratio_p50": 1.6,
    }
    text = rendered(web_table(sample_report(kernel)))
    assert "jobs page rendered" in text and "180.0 ms" in text
    assert "DOMContentLoaded" in text and "90.0 ms" in text
    assert "added by the route" in text and "1.5 ms" in text and "ratio p50 1.6" in text
    assert "Test CPU" in text
    assert "not measured" in rendered(web_table(sample_report(None)))


def measured(summary: dict[str, Any], samples: int) -> bool:
    return (
        summary["samples"] == samples
        and all(math.isfinite(summary[k]) and summary[k] > 0 for k in ("p50_ms", "p99_ms"))
        and summary["p50_ms"] <= summary["p99_ms"]
    )


@pytest.mark.e2e
@pytest.mark.browser
def test_a_small_run_measures_every_figure() -> None:
    if shutil.which("chromium") is None or not (ASSETS / "index.html").is_file():
        pytest.skip("needs chromium and the built dashboard (make setup)")
    command = [
        sys.executable, "-m", "kiban.cli.main", "bench", "web", "--json",
        "--jobs", "200", "--loads", "3", "--list-samples", "20", "--ttfb-samples", "5",
        "--kernel-samples", "10",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    report: dict[str, Any] = json.loads(lines[0])
    assert report["listed_total"] == 201  # the holder, 199 waiting, and the notebook's job
    assert measured(report["ttfb"], 5)
    assert measured(report["render"], 3) and measured(report["dom_content_loaded"], 3)
    assert report["dom_content_loaded"]["p50_ms"] <= report["render"]["p50_ms"]
    assert measured(report["list_api"], 20) and report["list_api"]["page_rows"] == 50
    kernel = report["kernel"]
    assert measured(kernel["route"], 10) and measured(kernel["direct"], 10)
    assert kernel["added_p50_ms"] == pytest.approx(
        kernel["route"]["p50_ms"] - kernel["direct"]["p50_ms"], abs=0.01
    )
    assert set(report["goals_met"]) == {"render_p50_ms", "route_added_p50_ms"}
    assert report["machine"]["cores"] >= 1
    assert "kiban bench web" in done.stderr
