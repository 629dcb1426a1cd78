"""The recommended policy plans jobs without a time limit on run times learned during the
replay, as the live loop does (``kiban.domain.runtime_estimate``), and reports its error."""

from __future__ import annotations

from pathlib import Path

from sim_support import replay, write_csv

from kiban.scheduler.decisions import Decisions
from kiban.scheduler.snapshot import Snapshot
from kiban.sim.engine import Simulator
from kiban.sim.policies import policy_named
from kiban.sim.run import SimOptions, prepare

HEADER = "submit_time,duration,gpus,tenant"
# One GPU: the four run one after the other (jobs submitted in the same second go in the
# replay's seeded order: lines 3, 2, 5, then 4, the 300 s one, from 300 to 600).
ROWS = ["0,100,1,vision", "0,100,1,vision", "0,300,1,vision", "0,100,1,vision"]


def test_estimates_are_learned_from_the_jobs_that_finished(tmp_path: Path) -> None:
    """After two 100 s runs of vision's 1-GPU jobs, the waiting ones plan on 100 s (the median
    of the key's runs, once it has two); before that, none has an estimate."""
    trace = write_csv(tmp_path / "t.csv", ROWS, HEADER)
    prepared = prepare(SimOptions(trace, nodes=1, gpus_per_node=1, rho=False))
    seen: dict[float, dict[str, float | None]] = {}

    def note(snapshot: Snapshot, _decisions: Decisions) -> None:
        seen[snapshot.now] = {job.id: job.estimated_runtime for job in snapshot.pending}

    Simulator(
        prepared.jobs, prepared.cluster, prepared.queues, policy_named("recommended"), on_cycle=note
    ).run()
    assert set(seen[100.0].values()) == {None}  # one run learned: not enough
    assert seen[200.0] == {"job-4": 100.0, "job-5": 100.0}
    assert seen[300.0] == {"job-4": 100.0}  # three 100 s runs learned


def test_the_replay_reports_the_estimates_error(tmp_path: Path) -> None:
    """Predicted before each was learned: job 5 as 100 s (ran 100: exact), job 4 as 100 s (ran
    300: off by 2/3); the median absolute percentage error is 33.3 %. The default policy
    estimates nothing and reports no such figure."""
    trace = write_csv(tmp_path / "t.csv", ROWS, HEADER)
    report = replay(trace, "recommended", "kiban")
    recommended, default = (r.summary for r in report.results)
    assert recommended.extra["estimate_mdape_percent"] == 33.3
    assert recommended.extra["estimates_checked"] == 2
    assert recommended.as_json()["estimate_mdape_percent"] == 33.3
    assert "estimate_mdape_percent" not in default.extra
    assert "estimate_mdape_percent" not in default.as_json()


def test_recommended_with_oracle_run_times_plans_on_the_truth(tmp_path: Path) -> None:
    """``recommended-oracle`` is recommended with the estimator replaced by the true remaining
    run times: every waiting job carries its duration from the first cycle on (job 4 ran 300 s
    above), nothing is estimated, and no estimate error is reported."""
    trace = write_csv(tmp_path / "t.csv", ROWS, HEADER)
    prepared = prepare(SimOptions(trace, nodes=1, gpus_per_node=1, rho=False))
    seen: dict[float, dict[str, tuple[float | None, float | None]]] = {}

    def note(snapshot: Snapshot, _decisions: Decisions) -> None:
        seen.setdefault(
            snapshot.now, {j.id: (j.max_runtime, j.estimated_runtime) for j in snapshot.pending}
        )

    oracle = policy_named("recommended-oracle")
    recommended = policy_named("recommended")
    assert (oracle.core, oracle.strategy) == (recommended.core, recommended.strategy)
    Simulator(prepared.jobs, prepared.cluster, prepared.queues, oracle, on_cycle=note).run()
    assert seen[0.0] == {
        "job-2": (100.0, None),
        "job-3": (100.0, None),
        "job-4": (300.0, None),
        "job-5": (100.0, None),
    }
    report = replay(trace, "recommended-oracle")
    assert "estimate_mdape_percent" not in report.results[0].summary.extra
