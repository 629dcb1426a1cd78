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
    assert set(extra["never_started_reasons"]) == {"Unschedulable"}  # not even on idle nodes
    assert report.results[0].summary.figures["jobs"] == 1


def test_srtf_preempts_for_less_remaining_time_without_losing_checkpointed_work(
    tmp_path: Path,
) -> None:
    # Checkpoints every second, so a preemption loses nothing. t=1: B (5 s) has less left than
    # A (9 s): A stops with 1 s done. t=2: C (1 s) has less left than B (4 s): B stops. C runs
    # 2-3, then B's 4 s (3-7), then A's 9 s (7-16).
    report = replay(write_csv(tmp_path / "t.csv", THREE), "srtf", checkpoint_s=1.0)
    assert jcts(report) == {2: 16.0, 3: 6.0, 4: 1.0}
    runs = runs_by_line(report)
    assert [runs[line].preemptions for line in (2, 3, 4)] == [1, 1, 0]
    figures = report.results[0].summary.figures
    assert figures["avg_jct_s"] == pytest.approx(23 / 3, abs=0.05)
    assert figures["lost_gpu_hours"] == 0.0
    assert figures["makespan_s"] == 16.0


def test_srtf_with_half_hour_checkpoints_loses_the_second_before_each_preemption(
    tmp_path: Path,
) -> None:
    # The same preemptions, but A and B each lose the 1 s they ran (no checkpoint yet): C 2-3,
    # B all 5 s (3-8), A all 10 s (8-18).
    report = replay(write_csv(tmp_path / "t.csv", THREE), "srtf")
    assert jcts(report) == {2: 18.0, 3: 7.0, 4: 1.0}
    runs = runs_by_line(report)
    assert (runs[2].lost_s, runs[3].lost_s, runs[4].lost_s) == (1.0, 1.0, 0.0)
    assert report.results[0].summary.figures["preemptions"] == 2


def test_srtf_does_not_preempt_for_an_equal_remaining_time(tmp_path: Path) -> None:
    # A (10 s) at 0; at 5, B (5 s) has as much left as A: no preemption (strictly less only).
    report = replay(write_csv(tmp_path / "t.csv", ["0,10,1,t,,,,", "5,5,1,t,,,,"]), "srtf")
    assert jcts(report) == {2: 10.0, 3: 10.0}
    assert report.results[0].summary.figures["preemptions"] == 0


def test_las_waits_within_a_level_and_preempts_when_the_runner_drops_one(tmp_path: Path) -> None:
    # One GPU. A (5,000 s) at 0; B (100 s) at 1,000 finds A in the same first queue and waits.
    # At 3,600 A reaches 1 GPU-hour and drops to the second queue: the core is woken and B
    # preempts it then. A checkpointed at that very instant (every 1,800 s) and loses nothing:
    # B runs 3,600-3,700, A its last 1,400 s, 3,700-5,100.
    report = replay(write_csv(tmp_path / "t.csv", ["0,5000,1,t,,,,", "1000,100,1,t,,,,"]), "las")
    assert jcts(report) == {2: 5100.0, 3: 2700.0}
    run = runs_by_line(report)[2]
    assert (run.preemptions, run.lost_s) == (1, 0.0)


def test_las_never_preempts_a_job_that_stays_in_the_first_queue(tmp_path: Path) -> None:
    # A runs 2,000 s: it never reaches 1 GPU-hour, so B (at 1,000) waits for its end.
    report = replay(write_csv(tmp_path / "t.csv", ["0,2000,1,t,,,,", "1000,100,1,t,,,,"]), "las")
    assert jcts(report) == {2: 2000.0, 3: 1100.0}
    assert report.results[0].summary.figures["preemptions"] == 0


def test_las_preemption_loses_the_work_since_the_checkpoint(tmp_path: Path) -> None:
    # B arrives at 4,000, when A is in the second queue: A stops, keeps 3,600 s, loses 400 s;
    # B runs 4,000-4,100, A the 1,400 s left, 4,100-5,500. A's attained service then counts
    # all 4,000 s it ran.
    report = replay(write_csv(tmp_path / "t.csv", ["0,5000,1,t,,,,", "4000,100,1,t,,,,"]), "las")
    assert jcts(report) == {2: 5500.0, 3: 100.0}
    run = runs_by_line(report)[2]
    assert (run.preemptions, run.lost_s, run.run_s) == (1, 400.0, 5400.0)


def test_a_two_gpu_job_drops_a_las_level_twice_as_fast(tmp_path: Path) -> None:
    # Two GPUs. A (2 GPUs, 5,000 s) at 0 reaches 3,600 GPU-s at 1,800 s; B (1 GPU, 100 s) at
    # 1,000 waits until then, preempts A at 1,800 (A checkpointed then) and runs 1,800-1,900;
    # A resumes at 1,900 with 3,200 s left.
    trace = write_csv(tmp_path / "t.csv", ["0,5000,2,t,,,,", "1000,100,1,t,,,,"])
    report = replay(trace, "las", gpus_per_node=2)
    assert jcts(report) == {2: 5100.0, 3: 900.0}


def test_without_borrowing_a_team_waits_for_its_own_quota(tmp_path: Path) -> None:
    # Two teams of one 8-GPU node each. team0 asks for two 8-GPU jobs of 100 s at t=0: with
    # borrowing the second runs at once on team1's idle node; without, it waits for the first.
    quotas = tmp_path / "vc.csv"
    quotas.write_text("vc,node num\nteam0,1\nteam1,1\n")
    trace = write_csv(tmp_path / "t.csv", ["0,100,8,team0,,,,", "0,100,8,team0,,,,"])
    lent = replay(trace, "fifo", nodes=None, gpus_per_node=8, quotas_from=quotas)
    assert sorted(jcts(lent).values()) == [100.0, 100.0]
    apart = replay(trace, "fifo", nodes=None, gpus_per_node=8, quotas_from=quotas, borrowing=False)
    assert sorted(jcts(apart).values()) == [100.0, 200.0]
    assert "no borrowing" in apart.prepared.cluster.description


def test_no_borrowing_needs_quotas(tmp_path: Path) -> None:
    trace = write_csv(tmp_path / "t.csv", THREE)
    with pytest.raises(ValueError, match="--no-borrowing needs --quotas-from"):
        replay(trace, "fifo", borrowing=False)


def test_a_shape_of_nodes_runs_one_replica_per_node(tmp_path: Path) -> None:
    """``nodes`` x ``gpus_per_node`` is a multi-node job: on one node of 2 GPUs, 2 x 1 GPU given
    as two nodes never starts, while 2 GPUs given as a total do."""
    trace = write_csv(tmp_path / "t.csv", ["0,10,2,t,,2,1,", "1,10,2,t,,,,"])
    report = replay(trace, "kiban", nodes=1, gpus_per_node=2)
    runs = runs_by_line(report)
    assert runs[2].job.task.max_per_node == 1
    assert runs[2].first_start is None and runs[2].waiting_reason == "Unschedulable"
    assert runs[3].first_start == 1.0
