"""Small scenarios whose answers are worked out by hand: exact JCTs, preemption and its cost."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_support import jcts, replay, runs_by_line, write_csv

# Three jobs on one GPU: A (line 2) at t=0 for 10 s, B (line 3) at t=1 for 5 s, C (line 4) at
# t=2 for 1 s. A starts at once either way; the others wait for it.
THREE = ["0,10,1,t,,,,", "1,5,1,t,,,,", "2,1,1,t,,,,"]


def test_fifo_runs_three_jobs_in_arrival_order(tmp_path: Path) -> None:
    report = replay(write_csv(tmp_path / "t.csv", THREE), "fifo")
    # A 0-10, B 10-15, C 15-16.
    assert jcts(report) == {2: 10.0, 3: 14.0, 4: 14.0}
    figures = report.results[0].summary.figures
    assert figures["avg_jct_s"] == pytest.approx(38 / 3, abs=0.05)
    assert figures["avg_queue_s"] == pytest.approx((0 + 9 + 13) / 3, abs=0.05)
    assert figures["makespan_s"] == 16.0
    assert figures["gpu_allocation"] == 1.0


def test_sjf_runs_the_shortest_waiting_job_first(tmp_path: Path) -> None:
    report = replay(write_csv(tmp_path / "t.csv", THREE), "sjf")
    # A 0-10 (alone at t=0), then C 10-11, then B 11-16.
    assert jcts(report) == {2: 10.0, 3: 15.0, 4: 9.0}
    assert report.results[0].summary.figures["avg_jct_s"] == pytest.approx(34 / 3, abs=0.05)


def test_the_same_trace_under_several_policies_in_one_run(tmp_path: Path) -> None:
    report = replay(write_csv(tmp_path / "t.csv", THREE), "fifo", "sjf", "kiban", "drf")
    assert [r.policy.name for r in report.results] == ["fifo", "sjf", "kiban", "drf"]
    assert jcts(report, 1) == {2: 10.0, 3: 15.0, 4: 9.0}
    # kiban and drf know no durations (no time limits): one tenant, first come first served.
    assert jcts(report, 2) == jcts(report, 3) == jcts(report, 0)


def test_a_preempted_job_loses_the_work_since_its_checkpoint_and_resumes(tmp_path: Path) -> None:
    # One GPU. low (line 2) runs 5,000 s from t=0; high (line 3), whose class preempts lower
    # priorities, arrives at t=4,000 for 1,000 s. Checkpoints every 1,800 s: low kept 3,600 s
    # and loses 400 s; high runs 4,000-5,000; low resumes with 1,400 s left: 5,000-6,400.
    trace = write_csv(tmp_path / "t.csv", ["0,5000,1,t,low,,,", "4000,1000,1,t,high,,,"])
    report = replay(trace, "kiban", checkpoint_s=1800.0)
    runs = runs_by_line(report)
    assert jcts(report) == {2: 6400.0, 3: 1000.0}
    assert (runs[2].preemptions, runs[2].lost_s, runs[2].attempt) == (1, 400.0, 2)
    assert runs[2].run_s == 5400.0  # 4,000 + 1,400: the lost 400 s were run twice
    figures = report.results[0].summary.figures
    assert figures["preemptions"] == 1
    assert figures["lost_gpu_hours"] == pytest.approx(400 / 3600, abs=0.01)
    assert figures["avg_queue_s"] == pytest.approx(((6400 - 5400) + 0) / 2)


def test_without_checkpoints_a_preemption_loses_the_whole_run(tmp_path: Path) -> None:
    trace = write_csv(tmp_path / "t.csv", ["0,5000,1,t,low,,,", "4000,1000,1,t,high,,,"])
    report = replay(trace, "kiban", checkpoint_s=0.0)
    runs = runs_by_line(report)
    assert runs[2].lost_s == 4000.0
    assert jcts(report)[2] == 5000.0 + 5000.0  # waits for high, then runs all 5,000 s again


def test_fifo_never_preempts(tmp_path: Path) -> None:
    trace = write_csv(tmp_path / "t.csv", ["0,5000,1,t,low,,,", "4000,1000,1,t,high,,,"])
    report = replay(trace, "fifo")
    assert jcts(report) == {2: 5000.0, 3: 2000.0}
    assert report.results[0].summary.figures["preemptions"] == 0


def test_a_gang_waits_until_all_of_it_fits(tmp_path: Path) -> None:
    # Two nodes of 2 GPUs. A 2-GPU job from t=0 to 100, then a 4-GPU gang (2 x 2) at t=1: it
    # cannot start on the two free GPUs, and starts at 100 when all four are free.
    trace = write_csv(tmp_path / "t.csv", ["0,100,2,t,,,,", "1,50,4,t,,,,"])
    report = replay(trace, "fifo", nodes=2, gpus_per_node=2)
    assert jcts(report) == {2: 100.0, 3: 149.0}
    run = runs_by_line(report)[3]
    assert run.job.task.replicas == 2 and run.job.task.gpu == 2


def test_a_time_limit_ends_a_run_that_would_go_on(tmp_path: Path) -> None:
    trace = write_csv(tmp_path / "t.csv", ["0,100,1,t,,,,30", "1,10,1,t,,,,"])
    report = replay(trace, "fifo")
    runs = runs_by_line(report)
    assert runs[2].killed and runs[2].finished_at == 30.0
    assert jcts(report)[3] == 39.0
    assert report.results[0].summary.figures["jobs"] == 1  # a killed job has no JCT
    assert report.results[0].summary.extra["killed_at_time_limit"] == 1


def test_a_job_larger_than_the_cluster_never_starts_and_says_why(tmp_path: Path) -> None:
    trace = write_csv(tmp_path / "t.csv", ["0,10,1,t,,,,", "1,10,4,t,,,,"])
    report = replay(trace, "kiban", nodes=1, gpus_per_node=2)
    extra = report.results[0].summary.extra
    assert extra["never_started"] == 1
    assert set(extra["never_started_reasons"]) <= {"NoNodeFits", "InsufficientCapacity"}
    assert report.results[0].summary.figures["jobs"] == 1
