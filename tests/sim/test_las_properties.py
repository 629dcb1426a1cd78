"""Preemption under LeastAttainedService queues never cycles and never starves a gang.

Random small workloads of one tenant (one queue, so the bounded LAS ground is the only one that
preempts) replay under ``recommended`` on two nodes of 4 GPUs: every job finishes, the largest
gang included; no preemption repeats a (victim, preemptor) pair at one instant (the simulator
counts such loops); and no job is preempted more often than it can drop a level (3 times).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_support import replay, write_csv

from kiban.scheduler.attained_service import LAS_THRESHOLDS_GPU_S

Row = tuple[int, int, int]  # submit second, duration seconds, GPUs

jobs = st.lists(
    st.tuples(
        st.integers(0, 20_000),
        st.integers(60, 20_000),
        st.sampled_from([1, 2, 4, 8]),
    ),
    min_size=2,
    max_size=14,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(rows=jobs)
def test_las_preemption_never_cycles_nor_starves_the_largest_gang(
    rows: list[Row], tmp_path: Path
) -> None:
    lines = [
        f"{at},{duration},{gpus},team,,{max(gpus // 4, 1)},{min(gpus, 4)},"
        for at, duration, gpus in rows
    ]
    trace = write_csv(tmp_path / "las.csv", lines)
    report = replay(trace, "recommended-las", nodes=2, gpus_per_node=4, checkpoint_s=600.0)
    (result,) = report.results
    assert result.error is None
    assert result.outcome is not None
    runs = result.outcome.runs
    assert all(r.finished_at is not None and not r.killed for r in runs)
    largest = max(runs, key=lambda r: (r.job.gpus, -r.job.submit_s))
    assert largest.first_start is not None
    assert result.summary.extra["preemption_loops"] == 0
    assert max(r.preemptions for r in runs) <= len(LAS_THRESHOLDS_GPU_S)


def test_the_recommended_cluster_file_declares_shortest_expected_service_queues() -> None:
    from kiban.scheduler.snapshot import QueueStrategy
    from kiban.sim.cluster import load_cluster_file

    example = Path(__file__).resolve().parents[2] / "examples" / "cluster-recommended.yaml"
    cluster = load_cluster_file(example)
    assert {q.strategy for q in cluster.queues} == {QueueStrategy.SHORTEST_EXPECTED_SERVICE}
