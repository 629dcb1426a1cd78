"""The forecast probe keeps the busiest snapshot of a replay and times the forecast on it."""

from __future__ import annotations

from pathlib import Path

from sim_support import write_csv

from kiban.sim.forecast_probe import busiest_snapshot, time_forecast
from kiban.sim.run import SimOptions


def test_the_probe_forecasts_on_the_snapshot_with_the_most_waiting_jobs(tmp_path: Path) -> None:
    # One GPU: A 0-10, then B (1) and C (2) wait; the busiest snapshot is at t=2 with both.
    trace = write_csv(tmp_path / "t.csv", ["0,10,1,t,,,,", "1,5,1,t,,,,", "2,1,1,t,,,,"])
    options = SimOptions(trace=trace, nodes=1, gpus_per_node=1, policies=("sjf",), rho=False)
    snapshot = busiest_snapshot(options, "sjf")
    assert (snapshot.now, len(snapshot.pending), len(snapshot.running)) == (2.0, 2, 1)
    result = time_forecast(snapshot, max_cycles=50, repeat=2)
    # sjf filled in the running job's end (t=10): both waiting jobs get an estimate.
    assert result["estimated"] == 2
    assert 0 <= result["min_s"] <= result["median_s"] <= result["max_s"]
