"""The simulator skips only cycles that cannot change anything, and its own arithmetic stays
the same: the replays with and without the cuts decide the same."""

from __future__ import annotations

from pathlib import Path

from tests.sim.sim_support import write_csv

from kiban.sim.engine import SimOutcome, Simulator
from kiban.sim.policies import policy_named
from kiban.sim.run import SimOptions, prepare


def _fifo(trace: Path, gpus: int, *, every_rerun: bool) -> SimOutcome:
    prepared = prepare(SimOptions(trace=trace, nodes=1, gpus_per_node=gpus, rho=False))
    simulator = Simulator(
        prepared.jobs, prepared.cluster, prepared.queues, policy_named("fifo"), window=2
    )
    if every_rerun:  # the rule before: again whenever some queue holds more than a window
        simulator.monotone = False
    return simulator.run()


def _starts(outcome: SimOutcome) -> dict[str, tuple[float | None, float | None]]:
    return {r.job.id: (r.first_start, r.finished_at) for r in outcome.runs}


def test_no_cycle_again_behind_a_strict_fifo_head_that_still_does_not_fit(tmp_path: Path) -> None:
    """Window 2, two GPUs, four jobs at once (the order among them is the trace's seeded one):
    the 2-GPU job starts, the 1-GPU one behind it waits for capacity and blocks its StrictFIFO
    queue; the cycle again at that instant (two more jobs behind) would start none."""
    trace = write_csv(
        tmp_path / "t.csv", ["0,100,1,a,,,,", "0,100,2,a,,,,", "0,100,1,a,,,,", "0,100,1,a,,,,"]
    )
    cut = _fifo(trace, 2, every_rerun=False)
    before = _fifo(trace, 2, every_rerun=True)
    assert _starts(cut) == _starts(before)
    starts = {job: start for job, (start, _end) in _starts(cut).items()}
    assert starts == {"job-3": 0.0, "job-2": 100.0, "job-5": 100.0, "job-4": 200.0}
    assert cut.cycles == before.cycles - 1


def test_the_cycle_again_still_runs_when_the_window_filled_with_jobs_that_fit(
    tmp_path: Path,
) -> None:
    """Window 2, four GPUs, five 1-GPU jobs: both of the window start, and the cycle again
    at the same instant starts the next two."""
    trace = write_csv(tmp_path / "t.csv", ["0,100,1,a,,,,"] * 5)
    cut = _fifo(trace, 4, every_rerun=False)
    assert _starts(cut) == _starts(_fifo(trace, 4, every_rerun=True))
    starts = [start for start, _end in _starts(cut).values() if start is not None]
    assert sorted(starts) == [0.0, 0.0, 0.0, 0.0, 100.0]
