"""The agent's CPU per node per check, measured over synthetic nodes."""

from __future__ import annotations

import pytest

from kiban.bench.health_agent import SyntheticReadings, measure_agent_cpu


def test_measures_checks_and_metrics_per_node_and_pass() -> None:
    result = measure_agent_cpu(nodes=4, gpus_per_node=8, passes=2)
    assert result["agent_cpu_ms_per_node_check"] > 0
    assert result["agent_cpu_ms_per_node_check"] == pytest.approx(
        result["agent_checks_cpu_ms_per_node"] + result["agent_metrics_cpu_ms_per_node"]
    )
    assert (result["nodes"], result["gpus_per_node"], result["passes"]) == (4, 8, 2)


def test_synthetic_counters_move_each_pass() -> None:
    source = SyntheticReadings(gpus_per_node=2)
    first, second = source.read("n"), source.read("n")
    assert second.gpus[0].pcie_replay_counter == first.gpus[0].pcie_replay_counter + 1


def test_refuses_no_nodes() -> None:
    with pytest.raises(ValueError, match="nodes"):
        measure_agent_cpu(nodes=0, gpus_per_node=8)
