"""``kiban bench control``: a small run reports its passes and lock waits; bad options are
refused with the option named."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kiban.bench.control import ControlBenchOptions, control_table, run_control_bench
from kiban.cli.main import app


def test_a_small_run_reports_passes_and_no_lock_wait_as_long_as_the_hang() -> None:
    options = ControlBenchOptions(running=6, services=2, passes=2, hang_s=5.0)
    report = run_control_bench(options, say=lambda line: None)
    this = report["this"]
    assert this["service_pass_p50_ms"] > 0 and this["loop_pass_p50_ms"] > 0
    # The probe hangs 5 s: neither the cancel nor the settling transaction it asks for (the
    # job is stopping) waits for it.
    assert 0 < this["longest_settling_lock_ms"] < 5000
    assert this["cancel_during_hang_ms"] < 5000
    assert report["machine"]["cores"] >= 1 and "against" not in report
    assert control_table(report).row_count == 7


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--services", "1"], "--services"),
        (["--passes", "0"], "--passes"),
        (["--hang", "0"], "--hang"),
        (["--against", "/nonexistent"], "--against"),
        (["--rounds", "0"], "--rounds"),
    ],
)
def test_bad_options_are_refused_naming_the_option(arguments: list[str], named: str) -> None:
    result = CliRunner().invoke(app, ["bench", "control", *arguments])
    assert result.exit_code == 2
    assert named in result.output


def test_against_needs_a_checkout(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no kiban checkout"):
        ControlBenchOptions(against=tmp_path)
