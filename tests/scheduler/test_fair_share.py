"""Across queues, the tenant with the lowest standing (decayed usage / weight) goes first."""

from __future__ import annotations

from kiban.scheduler import schedule
from kiban.testing import cluster, job, queue, snapshot


def test_team_with_less_recent_usage_goes_first_despite_later_submission() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=8),
            queues=[queue("a").tenant("heavy"), queue("b").tenant("light")],
            pending=[
                job("early").queue("a").tenant("heavy").replicas(1, gpu=8).submitted(0),
                job("late").queue("b").tenant("light").replicas(1, gpu=8).submitted(50),
            ],
            standings={"heavy": 1e6, "light": 10.0},
        )
    )
    assert [a.job_id for a in decisions.admitted] == ["late"]
    (wait,) = decisions.waiting
    assert wait.cluster_position == 1


def test_one_cycle_interleaves_teams_instead_of_giving_one_everything() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(4, gpus=1),
            queues=[queue("a").tenant("a").best_effort(), queue("b").tenant("b").best_effort()],
            pending=[
                *[job(f"a{i}").queue("a").tenant("a").submitted(i) for i in range(4)],
                *[job(f"b{i}").queue("b").tenant("b").submitted(10 + i) for i in range(4)],
            ],
            standings={"a": 0.0, "b": 1.0},
        )
    )
    started = sorted(a.job_id for a in decisions.admitted)
    assert started == ["a0", "a1", "b0", "b1"]


def test_weight_scales_the_charge_of_an_admission() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(3, gpus=1),
            queues=[
                queue("a").tenant("a").best_effort().weight(2),
                queue("b").tenant("b").best_effort(),
            ],
            pending=[
                *[job(f"a{i}").queue("a").tenant("a").submitted(i) for i in range(3)],
                *[job(f"b{i}").queue("b").tenant("b").submitted(10 + i) for i in range(3)],
            ],
        )
    )
    started = sorted(a.job_id for a in decisions.admitted)
    assert started == ["a0", "a1", "b0"]
