"""Properties of every replay: GPU-seconds are conserved, and the same seed gives the same run."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from sim_support import replay, write_csv

from kiban.scheduler.decisions import Decisions
from kiban.scheduler.snapshot import Snapshot
from kiban.sim.engine import ConservationError, check_conservation
from kiban.sim.metrics import JSON_KEYS

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
SIZES = [1, 1, 1, 1, 1, 1, 2, 4, 8, 16]


@pytest.fixture(scope="module")
def busy_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Philly-format day on which 4 teams ask more than 32 GPUs, many jobs in the same second
    (ties for the seed to break), priorities mixed so that the kiban policy preempts."""
    lines = [PHILLY_HEADER]
    for i in range(300):
        gpus = SIZES[(i * 7) % len(SIZES)]
        duration = 120 + (i * 7919) % 7200
        minute, second = divmod((i * 97) % 3600 // 3, 60)
        stamp = f"2017-10-09 {8 + i // 100:02d}:{minute:02d}:{second:02d}"
        lines.append(f"{stamp},{duration}.0,{gpus},{duration * gpus}.0,team{i % 4}")
    path = tmp_path_factory.mktemp("traces") / "philly_jobs_sia.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def quotas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("quotas") / "vc.csv"
    path.write_text("vc,node num\nteam0,1\nteam1,1\nteam2,1\n")  # team3 has none: shared
    return path


@pytest.mark.parametrize("policy", ["fifo", "sjf", "srtf", "las", "kiban", "drf"])
def test_every_policy_conserves_gpu_seconds(busy_trace: Path, policy: str) -> None:
    report = replay(busy_trace, policy, nodes=4, gpus_per_node=8, checkpoint_s=600.0)
    outcome = report.results[0].outcome
    assert outcome is not None
    check_conservation(outcome)  # run() checked it too; this says what it is
    served = sum(r.run_s * r.job.gpus for r in outcome.runs)
    work = sum(r.job.duration_s * r.job.gpus for r in outcome.runs)
    lost = sum(r.lost_s * r.job.gpus for r in outcome.runs)
    assert served == pytest.approx(work + lost, rel=1e-9)
    assert report.results[0].summary.figures["jobs"] == 300


def test_priority_preemptions_lose_work_and_still_conserve(tmp_path: Path) -> None:
    # 8 GPUs; every third job is high priority and preempts the low ones, which lose up to
    # 10 minutes of work each time (checkpoints every 600 s).
    classes = ["high", "low", "low"]
    rows = [
        f"{i * 97},{600 + (i * 7919) % 5400},{[1, 2, 4][i % 3]},t,{classes[i % 3]},,,"
        for i in range(120)
    ]
    report = replay(
        write_csv(tmp_path / "p.csv", rows), "kiban", nodes=1, gpus_per_node=8, checkpoint_s=600.0
    )
    outcome = report.results[0].outcome
    assert outcome is not None
    figures = report.results[0].summary.figures
    assert figures["preemptions"] > 0 and figures["lost_gpu_hours"] > 0
    served = sum(r.run_s * r.job.gpus for r in outcome.runs)
    lost = sum(r.lost_s * r.job.gpus for r in outcome.runs)
    work = sum(r.job.duration_s * r.job.gpus for r in outcome.runs)
    assert served == pytest.approx(work + lost, rel=1e-9)
    assert all(r.lost_s <= 600.0 * r.preemptions + 1e-6 for r in outcome.runs)


def test_a_broken_account_is_caught(busy_trace: Path) -> None:
    outcome = replay(busy_trace, "fifo", nodes=4, gpus_per_node=8).results[0].outcome
    run = outcome.runs[0]
    tampered = dataclasses.replace(
        outcome, runs=(dataclasses.replace(run, run_s=run.run_s + 10), *outcome.runs[1:])
    )
    with pytest.raises(ConservationError, match="served"):
        check_conservation(tampered)


@pytest.mark.parametrize("policy", ["kiban", "srtf", "las"])
def test_the_same_seed_gives_the_same_numbers(busy_trace: Path, policy: str) -> None:
    def figures(seed: int) -> tuple[dict[str, object], list[float | None]]:
        report = replay(busy_trace, policy, nodes=4, gpus_per_node=8, seed=seed, rho=True)
        result = report.results[0]
        numbers = {k: v for k, v in result.summary.figures.items() if k != "wall_s"}
        return numbers, [r.finished_at for r in result.outcome.runs]

    assert figures(7) == figures(7)
    assert figures(7)[0]["max_rho"] is not None


def test_the_cli_prints_exactly_the_json_keys(busy_trace: Path) -> None:
    command = [sys.executable, "-m", "kiban.cli.main", "sim", "--trace", str(busy_trace)]
    command += ["--nodes", "4", "--policy", "fifo", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.strip().splitlines()
    data = json.loads(line)
    assert tuple(data) == JSON_KEYS
    assert data["jobs"] == 300
    assert data["max_rho"] is not None and data["max_rho"] >= data["median_rho"] > 0
    assert "no time limit" in done.stderr  # the table and the notes go to stderr


def test_the_cli_compares_policies_and_refuses_bad_input(busy_trace: Path, tmp_path: Path) -> None:
    base = [sys.executable, "-m", "kiban.cli.main", "sim", "--trace", str(busy_trace)]
    done = subprocess.run(
        [*base, "--nodes", "4", "--compare", "fifo,sjf", "--no-rho", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert list(data) == ["fifo", "sjf"]
    assert all(tuple(v) == JSON_KEYS and v["max_rho"] is None for v in data.values())
    bad = write_csv(tmp_path / "bad.csv", ["0,ten,1,t,,,,"])
    failed = subprocess.run(
        [sys.executable, "-m", "kiban.cli.main", "sim", "--trace", str(bad), "--nodes", "1"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert failed.returncode == 1
    assert f"{bad}, line 2, column duration" in failed.stderr
    unknown = subprocess.run(
        [*base, "--nodes", "1", "--policy", "lifo"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert unknown.returncode == 2
    assert "unknown policy 'lifo'" in unknown.stderr and "srtf, las" in unknown.stderr


@pytest.mark.parametrize("policy", ["kiban", "drf", "srtf", "las"])
def test_borrowing_teams_and_reclaim_replay_to_the_end(
    busy_trace: Path, quotas: Path, policy: str
) -> None:
    """Teams that borrow and reclaim, with preemption: every job finishes, and no preemptor
    has to preempt again for room freed for it (the quota and nodes freed are held for it)."""
    report = replay(
        busy_trace, policy, nodes=4, gpus_per_node=8, quotas_from=quotas, checkpoint_s=600.0
    )
    assert report.results[0].error is None
    outcome = report.results[0].outcome
    assert outcome is not None
    assert report.results[0].summary.figures["jobs"] == 300


@pytest.mark.parametrize("policy", ["fifo", "srtf", "las", "kiban"])
def test_without_borrowing_no_team_uses_more_than_its_quota(
    busy_trace: Path, tmp_path: Path, policy: str
) -> None:
    """Partitions: in every cycle's snapshot a team queue uses at most its nominal GPUs (only
    ``shared``, which has none, runs on what they leave idle); every job still finishes (each
    fits its team's two nodes)."""
    from kiban.sim.engine import Simulator
    from kiban.sim.policies import policy_named
    from kiban.sim.run import SimOptions, prepare

    quotas = tmp_path / "vc.csv"
    quotas.write_text("vc,node num\nteam0,2\nteam1,2\nteam2,2\n")
    options = SimOptions(busy_trace, quotas_from=quotas, borrowing=False)
    prepared = prepare(options)
    over: list[tuple[float, str, int]] = []

    def note(snapshot: Snapshot, _decisions: Decisions) -> None:
        for q in snapshot.queues:
            nominal = sum((q.nominal or {}).values())
            if q.name != "shared" and sum(q.used.values()) > nominal:
                over.append((snapshot.now, q.name, sum(q.used.values())))

    simulator = Simulator(
        prepared.jobs, prepared.cluster, prepared.queues, policy_named(policy), on_cycle=note
    )
    outcome = simulator.run()
    assert over == []
    assert all(r.finished_at is not None for r in outcome.runs)
