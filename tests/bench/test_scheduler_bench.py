"""``kiban bench scheduler``: the synthetic cluster, the cycle runner, the report (never speed)."""

from __future__ import annotations

import collections
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kiban.bench.loadgen import BenchError
from kiban.bench.scheduler import CycleRunner, run_case
from kiban.bench.synthetic import (
    FLAVOR,
    TRACES_ENV,
    Cluster,
    Scenario,
    TraceJob,
    build_cluster,
    build_scenario,
    draw_jobs,
    find_trace,
    load_philly,
)
from kiban.scheduler import Admit, Decisions, ReplicaPlacement, schedule
from kiban.sim.topology import (
    HOSTNAME_LABEL,
    HOSTS_PER_LOCAL_BLOCK,
    HOSTS_PER_NETWORK_BLOCK,
    LOCAL_BLOCK_LABEL,
    NETWORK_BLOCK_LABEL,
    TOPOLOGY_LEVELS,
    split_gpus,
)

REQUIRED_KEYS = {"placements_per_s", "p50_cycle_ms", "p99_cycle_ms", "peak_rss_mb"}


# Sizes in the Philly trace's proportions (93% one GPU, some 8, a few 16 to 128), written in
# its CSV format so that the real loading code reads it: the tests do not depend on where the
# shared traces are.
MADE_SIZES = [1] * 93 + [2, 2, 4, 4, 8, 8, 8, 16, 32, 64, 128]


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("traces")
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(2000):
        gpus = MADE_SIZES[(i * 37) % len(MADE_SIZES)]
        duration = 60.0 + (i * 7919) % 86400
        lines.append(f"2017-10-09 07:01:55,{duration},{gpus},{duration * gpus},vc{i % 15}")
    (directory / "philly_jobs_sia.csv").write_text("\n".join(lines) + "\n")
    return directory


@pytest.fixture(scope="module")
def trace(trace_dir: Path) -> list[TraceJob]:
    return load_philly(find_trace(trace_dir))


def test_the_shared_philly_trace_loads_when_it_is_there() -> None:
    try:
        path = find_trace()
    except BenchError as exc:
        pytest.skip(f"the shared Philly trace is not here: {exc}")
    jobs = load_philly(path)
    assert len(jobs) > 80_000
    assert {j.gpus for j in jobs} >= {1, 8, 128}


@pytest.fixture(scope="module")
def cluster(trace: list[TraceJob]) -> Cluster:
    return build_cluster(trace, nodes=128, gpus_per_node=8, busy=0.9, seed=1)


@pytest.fixture(scope="module")
def scenario(trace: list[TraceJob], cluster: Cluster) -> Scenario:
    # Few queues: on 1,024 GPUs, 30 would each have a quota smaller than the trace's big jobs.
    return build_scenario(cluster, draw_jobs(trace, 200, seed=1), queues=6, cohorts=2, seed=1)


def test_a_missing_trace_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRACES_ENV, str(tmp_path))
    with pytest.raises(BenchError, match=f"{TRACES_ENV}.*philly_jobs_sia.csv"):
        find_trace()
    with pytest.raises(BenchError, match=str(tmp_path)):
        find_trace(tmp_path)


def test_a_trace_without_its_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "philly_jobs_sia.csv"
    path.write_text("timestamp,gpus\n2017-10-09 07:01:55,1\n")
    with pytest.raises(BenchError, match="no column duration, num_gpus"):
        load_philly(path)


@pytest.mark.parametrize(
    ("gpus", "per_node", "expected"),
    [
        (1, 8, (1, 1)),
        (4, 8, (1, 4)),
        (8, 8, (1, 8)),
        (12, 8, (2, 6)),
        (16, 8, (2, 8)),
        (24, 8, (3, 8)),
        (128, 8, (16, 8)),
        (6, 4, (2, 3)),
    ],
)
def test_a_job_runs_as_the_fewest_equal_replicas_that_fit_a_node(
    gpus: int, per_node: int, expected: tuple[int, int]
) -> None:
    assert split_gpus(gpus, per_node) == expected


def test_nodes_carry_the_four_topology_levels(trace: list[TraceJob]) -> None:
    cluster = build_cluster(trace, nodes=300, gpus_per_node=8, busy=0.5, seed=1)
    assert [n.name for n in cluster.nodes[:2]] == ["node-00000", "node-00001"]
    for node in cluster.nodes:
        assert set(TOPOLOGY_LEVELS) <= set(node.labels)
        assert node.topology == tuple(node.labels[level] for level in TOPOLOGY_LEVELS)
        assert node.labels[HOSTNAME_LABEL] == node.name
        assert node.flavor == FLAVOR
    local = collections.Counter(n.labels[LOCAL_BLOCK_LABEL] for n in cluster.nodes)
    network = collections.Counter(n.labels[NETWORK_BLOCK_LABEL] for n in cluster.nodes)
    assert max(local.values()) == HOSTS_PER_LOCAL_BLOCK
    assert sorted(network.values()) == [300 - 2 * HOSTS_PER_NETWORK_BLOCK] + 2 * [
        HOSTS_PER_NETWORK_BLOCK
    ]
    # Each local block lies in one network block, each network block in one island.
    for inner, outer in ((2, 1), (1, 0)):
        parents = collections.defaultdict(set)
        for node in cluster.nodes:
            parents[node.topology[inner]].add(node.topology[outer])
        assert all(len(p) == 1 for p in parents.values())


def test_job_sizes_follow_the_trace(trace: list[TraceJob]) -> None:
    jobs = draw_jobs(trace, 3000, seed=2)
    sizes = {j.gpus for j in trace}
    assert {j.gpus for j in jobs} <= sizes
    assert min(sizes) >= 1
    assert max(sizes) <= 128
    share = sum(j.gpus == 1 for j in trace) / len(trace)
    assert abs(sum(j.gpus == 1 for j in jobs) / len(jobs) - share) < 0.03
    assert draw_jobs(trace, 3000, seed=2) == jobs
    assert draw_jobs(trace, 3000, seed=3) != jobs


def test_waiting_jobs_are_gangs_of_whole_replicas(
    trace: list[TraceJob], scenario: Scenario
) -> None:
    drawn = draw_jobs(trace, 200, seed=1)
    assert [j.total_gpus for j in scenario.pending] == [j.gpus for j in drawn]
    for job in scenario.pending:
        (task,) = job.tasks
        assert job.gang_size == task.replicas
        assert 1 <= task.gpu <= 8
        assert (task.replicas > 1) == (job.topology is not None)
    assert {j.queue for j in scenario.pending} <= {q.name for q in scenario.queues}


def test_queues_share_the_cluster_in_cohorts(cluster: Cluster, scenario: Scenario) -> None:
    assert len(scenario.queues) == 6
    assert sum((q.nominal or {})[FLAVOR] for q in scenario.queues) == cluster.total_gpus
    assert collections.Counter(q.cohort for q in scenario.queues) == {
        f"cohort-{c}": 3 for c in range(2)
    }
    used = sum(q.used.get(FLAVOR, 0) for q in scenario.queues)
    assert used == cluster.busy_gpus == sum(j.gpus for j in scenario.running)


def test_the_cluster_is_busy_as_asked_and_consistent(cluster: Cluster, scenario: Scenario) -> None:
    free = sum(len(n.free_gpu_ids) for n in cluster.nodes)
    assert free + cluster.busy_gpus == cluster.total_gpus
    assert 0.85 * cluster.total_gpus <= cluster.busy_gpus <= round(0.9 * cluster.total_gpus)
    CycleRunner(scenario).check()


def test_the_same_cluster_and_jobs_whatever_the_queues(
    trace: list[TraceJob], cluster: Cluster, scenario: Scenario
) -> None:
    other = build_scenario(cluster, draw_jobs(trace, 200, seed=1), queues=50, cohorts=2, seed=1)
    assert other.nodes == scenario.nodes
    assert [j.replicas for j in other.running] == [j.replicas for j in scenario.running]
    assert [j.tasks for j in other.pending] == [j.tasks for j in scenario.pending]
    assert len(other.queues) == 50


def test_the_runner_admits_without_overcommitting(scenario: Scenario) -> None:
    """Every waiting job starts; preempted ones (waiting or running at the start) start again,
    and each start places exactly its gang."""
    runner = CycleRunner(scenario)
    jobs = {j.id for j in scenario.pending}
    admitted: list[str] = []
    replicas = gpus = 0
    for _ in range(400):
        if not runner.pending:
            break
        snapshot = runner.snapshot()
        decisions = schedule(snapshot, runner.policy)
        waiting = {j.id: j for j in snapshot.pending}
        for admit in decisions.admitted:
            replicas += waiting[admit.job_id].total_replicas
            gpus += waiting[admit.job_id].total_gpus
        runner.apply(decisions)
        runner.check()
        admitted += [a.job_id for a in decisions.admitted]
        if not decisions.admitted and not decisions.preempted:
            runner.finish_next()
    assert not runner.pending
    assert jobs <= set(admitted)
    assert len(admitted) == runner.admitted == len(jobs) + runner.preempted
    assert (runner.replicas_placed, runner.gpus_placed) == (replicas, gpus)


def test_the_clusters_running_index_holds_its_running_jobs_and_changes_no_decision(
    scenario: Scenario,
) -> None:
    """The running jobs the cluster state hands the core by queue are exactly its running jobs,
    cycle after cycle, and the core decides the same with them as when it groups them itself."""
    runner = CycleRunner(scenario)
    preempted = 0
    for _ in range(400):
        if not runner.pending:
            break
        snapshot = runner.snapshot()
        index = snapshot.running_index
        assert index is not None
        grouped: dict[str, set[str]] = collections.defaultdict(set)
        for running in snapshot.running:
            grouped[running.queue].add(running.id)
        assert {q: {j.id for j in jobs} for q, jobs in index.by_queue.items()} == grouped
        assert [j.id for j in index.stopping] == [j.id for j in snapshot.running if j.preempted_by]
        decisions = schedule(snapshot, runner.policy)
        assert schedule(dataclasses.replace(snapshot, running_index=None), runner.policy) == (
            decisions
        )
        preempted += len(decisions.preempted)
        runner.apply(decisions)
        if not decisions.admitted and not decisions.preempted:
            runner.finish_next()
    assert not runner.pending
    assert preempted > 0  # victim searches, which read the index, did find victims


def test_the_runner_refuses_a_placement_on_busy_gpus(scenario: Scenario) -> None:
    runner = CycleRunner(scenario)
    snapshot = runner.snapshot()
    job = next(j for j in snapshot.pending if j.total_replicas == 1)
    busy = next(n for n in snapshot.nodes if len(n.free_gpu_ids) < n.gpus)
    taken = next(i for i in range(busy.gpus) if i not in busy.free_gpu_ids)
    (task,) = job.tasks
    ids = (taken, *(i for i in range(busy.gpus) if i != taken))[: task.gpu]
    placement = ReplicaPlacement(task.name, 0, 0, busy.name, ids, task.cpu_millis, task.memory)
    with pytest.raises(BenchError, match="free"):
        runner.apply(Decisions((Admit(job.id, (placement,)),), ()))


def test_a_case_reports_consistent_numbers(scenario: Scenario) -> None:
    result = run_case(scenario, max_cycles=1000, time_limit_s=60)
    assert result["stopped"] == "every job admitted"
    assert result["jobs_admitted"] == len(scenario.pending)
    assert result["jobs_left_waiting"] == result["waiting_at_end"] == 0
    assert result["starts"] == len(scenario.pending) + result["jobs_preempted"]
    assert result["replicas_placed"] >= sum(j.total_replicas for j in scenario.pending)
    # core_s is rounded to the millisecond: the rate agrees within that rounding.
    assert result["placements_per_s"] * result["core_s"] == pytest.approx(
        result["replicas_placed"], abs=result["placements_per_s"] * 0.0005 + 1
    )
    assert result["cycles"] >= result["admitting_cycles"] >= 1
    assert result["p50_cycle_ms"] <= result["p99_cycle_ms"] <= result["max_cycle_ms"]
    assert 0 < result["p99_cycle_cpu_ms"] <= result["core_cpu_s"] * 1000
    assert result["peak_rss_mb"] > 0


def test_a_case_stops_at_its_cycle_bound(scenario: Scenario) -> None:
    result = run_case(scenario, max_cycles=3, time_limit_s=60)
    assert result["cycles"] == 3
    assert result["stopped"] == "max cycles (3)"
    assert result["jobs_admitted"] + result["jobs_left_waiting"] == len(scenario.pending)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kiban.cli.main", "bench", "scheduler", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)


def test_the_cli_prints_one_json_object(trace_dir: Path) -> None:
    done = _cli(
        "--nodes",
        "64",
        "--jobs",
        "200",
        "--big-queues",
        "1000",
        "--max-cycles",
        "60",
        "--json",
        "--traces",
        str(trace_dir),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    report: dict[str, Any] = json.loads(lines[0])
    assert set(report) >= REQUIRED_KEYS | {"queues_1000", "settings", "machine", "goals"}
    assert set(report["queues_1000"]) >= REQUIRED_KEYS
    assert report["settings"]["nodes"] == 64
    assert report["settings"]["queues"] == 30
    assert report["queues"] == 30
    assert report["queues_1000"]["queues"] == 1000
    assert report["jobs_admitted"] + report["jobs_left_waiting"] == 200
    assert report["cycles"] <= 60
    assert report["queues_1000"]["cycles"] <= 60
    assert report["goals"] == {"placements_per_s": 10_000.0, "p99_cycle_ms": 100.0}
    assert report["machine"]["cores"] >= 1
    assert "kiban bench scheduler" in done.stderr


def test_the_cli_refuses_a_bad_value_in_one_line() -> None:
    done = _cli("--busy", "1.5")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --busy must be at least 0 and less than 1"
    assert done.stdout == ""
