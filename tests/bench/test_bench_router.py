"""``kiban bench router``: the report's shape and that its figures are measured (never speed)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from rich.console import Console

from kiban.bench.router import CpuTally, goals_met, over_rounds, router_table
from kiban.bench.router_options import RouterBenchOptions

PHASE_KEYS = {
    "p50_ms",
    "p99_ms",
    "requests_per_s",
    "requests",
    "errors",
    "answers_in_phase",
    "each_round",
    "cpu_us_per_request",
    "cores_busy",
}


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value) and value > 0


@pytest.mark.e2e
def test_a_quick_run_through_the_cli() -> None:
    """Two client counts, short phases, no cold start: one JSON object on one line."""
    command = [
        sys.executable,
        "-m",
        "kiban.cli.main",
        "bench",
        "router",
        "--clients",
        "1",
        "--clients",
        "4",
        "--duration",
        "0.5",
        "--warmup",
        "0.2",
        "--rounds",
        "2",
        "--step-observe",
        "8",  # the new replica starts, is polled and serves: room for a loaded machine
        "--no-cold-start",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert set(report["latency"]) == {"1", "4"}
    for entry in report["latency"].values():
        for side in ("direct", "router"):
            assert set(entry[side]) == PHASE_KEYS
            assert entry[side]["errors"] == 0
            assert entry[side]["requests"] > 0
            assert _positive(entry[side]["p50_ms"]) and _positive(entry[side]["p99_ms"])
            assert entry[side]["p50_ms"] <= entry[side]["p99_ms"]
            rounds = entry[side]["each_round"]
            assert len(rounds) == 2  # direct and router took turns, twice
            # the router's CPU is told for each round it ran in (a spread is the machine's)
            assert all(_positive(r.get("router_cpu_us")) == (side == "router") for r in rounds)
            for q in ("p50_ms", "p99_ms"):  # the median of two rounds lies between them
                low, high = sorted(r[q] for r in rounds)
                assert low - 1e-3 <= entry[side][q] <= high + 1e-3
        assert entry["added_p50_ms"] == pytest.approx(
            entry["router"]["p50_ms"] - entry["direct"]["p50_ms"], abs=1e-3
        )
        assert _positive(entry["router_cpu_ms_per_request"])
        direct_cpu, router_cpu = (
            entry[side]["cpu_us_per_request"] for side in ("direct", "router")
        )
        assert set(direct_cpu) == {"load_generator", "replica"}
        assert set(router_cpu) == {"load_generator", "replica", "router"}
        assert all(_positive(us) for us in (*direct_cpu.values(), *router_cpu.values()))
        assert entry["router_cpu_ms_per_request"] == pytest.approx(
            router_cpu["router"] / 1000, abs=1e-4
        )
        for side in ("direct", "router"):  # the processes cannot keep more cores busy than exist
            assert 0 < entry[side]["cores_busy"] <= report["machine"]["cores"] * 1.05
    # 50 clients was not run: the headline is the largest count run
    assert report["headline_clients"] == 4
    assert report["added_p50_ms"] == report["latency"]["4"]["added_p50_ms"]
    assert set(report["goals_met"]) == {"added_p50_ms", "added_p99_ms"}
    assert report["failed_requests"] == 0
    scale = report["autoscaler"]
    assert scale["replicas_requested"] > scale["replicas_before"]
    assert _positive(scale["scale_up_requested_s"])
    assert _positive(scale["first_new_replica_serving_s"])
    assert scale["first_new_replica_serving_s"] >= scale["scale_up_requested_s"]
    assert report["cold_start"] is None and "skipped" in report["cold_start_reason"]
    assert report["machine"]["cores"] >= 1
    assert report["replica_link"] == "unix"  # as the local executor's replicas are reached
    build = report["router_build"]
    assert isinstance(build["compiled"], bool) and build["detail"]
    if build["compiled"]:  # a plain-Python router ran beside it, at the headline count only
        assert "plain_router" not in report["latency"]["1"]
        headline = report["latency"]["4"]
        assert set(headline["plain_router"]) == PHASE_KEYS
        assert headline["plain_router"]["errors"] == 0
        assert _positive(headline["plain_router_cpu_ms_per_request"])
        gain = report["compiled_vs_plain"]
        assert gain["cpu_ratio_compiled_to_plain"] == pytest.approx(
            headline["router_cpu_ms_per_request"] / headline["plain_router_cpu_ms_per_request"],
            abs=1e-3,
        )
    else:
        assert report["compiled_vs_plain"] is None
    assert "kiban bench router" in done.stderr  # the table


def test_the_table_renders_a_report() -> None:
    phase = {
        "p50_ms": 0.2,
        "p99_ms": 0.5,
        "requests_per_s": 100.0,
        "requests": 10,
        "errors": 0,
        "answers_in_phase": 12,
        "cpu_us_per_request": {"load_generator": 7.9, "replica": 7.3},
        "cores_busy": 1.87,
    }
    routed = {
        **phase,
        "cpu_us_per_request": {"load_generator": 9.3, "replica": 5.1, "router": 15.2},
        "cores_busy": 1.85,
        "each_round": [{"router_cpu_us": us} for us in (15.0, 22.5, 15.2)],
    }
    report = {
        "headline_clients": 50,
        "latency": {
            "50": {
                "direct": phase,
                "router": routed,
                "added_p50_ms": 0.0,
                "added_p99_ms": 0.0,
                "router_cpu_ms_per_request": 0.02,
                "plain_router": {**phase, "p50_ms": 0.9},
                "plain_added_p50_ms": 0.7,
                "plain_added_p99_ms": 0.1,
                "plain_router_cpu_ms_per_request": 0.025,
            }
        },
        "router_build": {"compiled": True, "detail": "compiled by mypyc (build abc)"},
        "compiled_vs_plain": {"cpu_ratio_compiled_to_plain": 0.8},
        "goals_met": {"added_p50_ms": False, "added_p99_ms": False},
        "failed_requests": 7,
        "autoscaler": {
            "clients_before": 2,
            "clients_after": 20,
            "replicas_requested": 3,
            "scale_up_requested_s": 0.5,
            "first_new_replica_serving_s": 1.0,
            "all_requested_ready_s": None,
        },
        "cold_start": None,
        "cold_start_reason": "not installed",
        "machine": {"cpu_model": "x", "cores": 2, "memory_gib": 1.0, "python": "p", "os": "o"},
    }
    console = Console(record=True, width=200)
    console.print(router_table(report))
    text = console.export_text()
    assert "not installed" in text and "50" in text
    assert "7 requests failed" in text
    assert "50, plain Python" in text and "0.9 ms" in text
    assert "compiled by mypyc (build abc)" in text and "compiled / plain Python = 0.8" in text
    words = " ".join(text.split())  # the caption wraps at the table's width
    assert "direct: load generator 7.9 µs, replica 7.3 µs; 1.87 cores busy" in words
    assert (
        "via the router: load generator 9.3 µs, replica 5.1 µs, router 15.2 µs "
        "(by round: 15, 22.5, 15.2); 1.85 cores busy"
    ) in words


def test_a_cpu_tally_sums_phases_and_knows_when_it_cannot_tell() -> None:
    tally = CpuTally()
    tally.add({"router": 1.0, "replica": 2.0}, {"router": 1.5, "replica": 2.25}, wall_s=0.5)
    tally.add({"router": 3.0, "replica": 3.0}, {"router": 3.5, "replica": 3.25}, wall_s=0.5)
    assert tally.per_request_us(100_000) == {"router": 10.0, "replica": 5.0}
    assert tally.cores_busy() == 1.5  # 1.5 CPU seconds in 1 s of phases
    tally.add({"router": None, "replica": 4.0}, {"router": 5.0, "replica": 4.5}, wall_s=1.0)
    assert tally.per_request_us(100_000)["router"] is None  # unknown stays unknown
    assert tally.cores_busy() is None


def _entry(added_p50_ms: float, added_p99_ms: float, router_errors: int = 0) -> dict[str, Any]:
    phase = {"errors": 0}
    return {
        "direct": phase,
        "router": {"errors": router_errors},
        "added_p50_ms": added_p50_ms,
        "added_p99_ms": added_p99_ms,
    }


def test_goals_are_met_only_by_figures_of_answered_requests() -> None:
    assert goals_met(_entry(0.4, 1.5)) == {"added_p50_ms": True, "added_p99_ms": True}
    assert goals_met(_entry(0.6, 2.5)) == {"added_p50_ms": False, "added_p99_ms": False}
    # fast because the requests failed: not met
    assert goals_met(_entry(0.1, 0.2, router_errors=3)) == {
        "added_p50_ms": False,
        "added_p99_ms": False,
    }


def test_options_are_validated() -> None:
    with pytest.raises(ValueError):
        RouterBenchOptions(clients=(0,))
    with pytest.raises(ValueError):
        RouterBenchOptions(duration_s=0)
    with pytest.raises(ValueError):
        RouterBenchOptions(replica_link="udp")
    with pytest.raises(ValueError, match="--rounds"):
        RouterBenchOptions(rounds=0)


def test_a_side_over_rounds_takes_medians_and_sums_counts() -> None:
    """One slow round (a busy host for a few seconds) does not move the side's figures."""

    def phase(p50: float, p99: float, rate: float, errors: int = 0) -> dict[str, Any]:
        return {
            "p50_ms": p50,
            "p99_ms": p99,
            "requests_per_s": rate,
            "requests": 100,
            "errors": errors,
            "answers_in_phase": 120,
        }

    side = over_rounds([phase(0.7, 1.1, 60000), phase(1.4, 3.0, 30000, 2), phase(0.75, 1.0, 61000)])
    assert (side["p50_ms"], side["p99_ms"], side["requests_per_s"]) == (0.75, 1.1, 60000)
    assert (side["requests"], side["errors"], side["answers_in_phase"]) == (300, 2, 360)
    assert [r["p50_ms"] for r in side["each_round"]] == [0.7, 1.4, 0.75]
    assert "router_cpu_us" not in side["each_round"][0]  # a direct side has no router
    routed = over_rounds([{**phase(0.9, 1.5, 50000), "router_cpu_us": 16.5}])
    assert routed["each_round"][0]["router_cpu_us"] == 16.5
