"""``kiban bench health`` on a small cluster: the keys the issue names, measured; bad options
refused."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kiban.bench.health import HealthBenchOptions, health_table, run_health_bench


def test_small_run_reports_fault_to_requeue_and_what_it_measured() -> None:
    report = run_health_bench(
        HealthBenchOptions(nodes=8, faults=2, intervals=3, seed=3, metrics_nodes=64, batch_size=4)
    )
    for key in (
        "fault_to_requeue_p50_s",
        "fault_to_requeue_p99_s",
        "metrics_render_s",
        "metrics_bytes",
        "agent_cpu_ms_per_node_check",
        "ingest_reports_per_s",
        "ingest_batched_reports_per_s",
        "ingest_batch_size",
        "machine",
    ):
        assert key in report
    assert report["faults"] == 2
    assert report["reports"] == 8 * 3
    # at least the wait for the next check (>= 0), at most that wait's bound plus handling
    assert 0 < report["fault_to_requeue_p50_s"] <= report["fault_to_requeue_p99_s"]
    assert report["wait_for_check_p99_s"] <= 5.0
    assert report["handling_p99_s"] > 0
    assert report["metrics_render_s"] > 0
    assert report["metrics_bytes"] > 0
    assert report["agent_cpu_ms_per_node_check"] > 0
    # the intake, both ways against kiban up: every report taken (a refusal raises)
    assert report["ingest_batch_size"] == 4
    assert report["ingest_reports_per_s"] > 0 and report["ingest_batched_reports_per_s"] > 0
    assert report["ingest_server_cpu_ms_per_report"] > 0
    assert report["ingest_test_client_reports_per_s"] > 0
    out = io.StringIO()
    Console(file=out, width=200).print(health_table(report))
    text = out.getvalue()
    assert "fault to requeue p99" in text
    assert "4 per POST" in text
    assert "not measured" not in text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nodes": 1}, "--nodes"),
        ({"faults": 0}, "--faults"),
        ({"nodes": 8, "faults": 5}, "--faults"),
        ({"interval_s": 0}, "--interval"),
        ({"intervals": 2}, "--intervals"),
        ({"batch_size": 1}, "batch_size"),
        ({"batch_size": 257}, "batch_size"),
    ],
)
def test_bad_options_are_refused_naming_them(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HealthBenchOptions(**options)  # type: ignore[arg-type]
