"""Readings recorded on real GPUs (``scripts/gpu-check.sh`` saves them under
``fixtures/recorded/``) and one synthetic H100 x 8 node: evaluated here, each gives the
conditions the agent gave when the reading was taken. Zero recorded files is zero cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiban.health.checks import CHECKS, HealthReason, evaluate
from kiban.health.conditions import ConditionStatus
from kiban.health.report import NodeHealthReport
from kiban.health.thresholds import HealthThresholds

FIXTURES = Path(__file__).parent / "fixtures"
FILES = sorted(FIXTURES.glob("*.json")) + sorted((FIXTURES / "recorded").glob("*.json"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_recorded_reading_gives_the_conditions_it_gave(path: Path) -> None:
    recorded = NodeHealthReport.model_validate_json(path.read_text())
    reading = recorded.reading
    assert reading.nvml_available, reading.error
    assert reading.gpus, "a fixture of a node without GPUs checks nothing"
    found = evaluate(reading, None, HealthThresholds(), len(reading.gpus), reading.taken_at, {})
    assert [c.type for c in found] == list(CHECKS)
    assert [(c.type, c.status, c.reason) for c in found] == [
        (c.type, c.status, c.reason) for c in recorded.conditions
    ]
    for condition in found:  # with NVML there, Unknown only for a field the GPU did not give
        if condition.status is ConditionStatus.UNKNOWN:
            assert condition.reason == HealthReason.NOT_REPORTED, condition


def test_the_synthetic_node_has_its_faults() -> None:
    recorded = NodeHealthReport.model_validate_json(
        (FIXTURES / "synthetic-h100x8.json").read_text()
    )
    failing = {c.type.value for c in recorded.conditions if c.status is ConditionStatus.TRUE}
    assert failing == {"GpuRowRemap", "GpuThermal"}
