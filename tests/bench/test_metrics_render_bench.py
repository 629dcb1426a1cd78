"""``measure_metrics_render`` on a small fleet: its keys, and series that grow with the nodes
as the cardinality rule says (four per node, one per node and condition)."""

from __future__ import annotations

from kiban.bench.metrics_render import AGENT_CHECKS, measure_metrics_render


def test_series_per_node_are_bounded() -> None:
    small = measure_metrics_render(nodes=64, gpus_per_node=8, repeats=1)
    large = measure_metrics_render(nodes=128, gpus_per_node=8, repeats=1)
    assert set(small) >= {"metrics_render_s", "metrics_bytes", "metrics_series"}
    assert small["metrics_render_s"] > 0 and small["metrics_bytes"] > 0
    # at this size every node runs one job, and each of those jobs is idle (one series each)
    per_node = (large["metrics_series"] - small["metrics_series"]) / 64
    assert per_node == 4 + len(AGENT_CHECKS) + 1
