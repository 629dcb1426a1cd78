"""LeastAttainedService queues: order by attained GPU-seconds, and their bounded preemption.

Levels (Tiresias' thresholds 3,600, 7,200 and 18,000 GPU-seconds): 0 below one GPU-hour, 1 from
one to two, 2 from two to five, 3 beyond.
"""

from __future__ import annotations

import pytest

from kiban.scheduler import Decisions, schedule
from kiban.scheduler.attained_service import (
    LasOrder,
    las_level,
    next_level_after,
    with_queue_strategies,
)
from kiban.scheduler.policy import DEFAULT_POLICY, Policy
from kiban.testing import cluster, job, queue, running, snapshot


def admitted(decisions: Decisions) -> list[str]:
    return sorted(a.job_id for a in decisions.admitted)


def victims(decisions: Decisions) -> list[str]:
    return [p.victim_id for p in decisions.preempted]


@pytest.mark.parametrize(
    ("gpu_s", "level"), [(0, 0), (3599, 0), (3600, 1), (7199, 1), (7200, 2), (18000, 3)]
)
def test_levels_are_tiresias_thresholds(gpu_s: float, level: int) -> None:
    assert las_level(gpu_s) == level


def test_next_level_is_the_run_time_to_the_next_threshold() -> None:
    assert next_level_after(0, 4) == 900  # 3,600 GPU-s at 4 GPUs
    assert next_level_after(5000, 2) == 1100  # (7,200 - 5,000) / 2
    assert next_level_after(20000, 8) is None  # the last level


def test_the_least_attained_service_starts_first_whatever_came_first() -> None:
    """Hand-computed: three 1-GPU jobs, 2 free GPUs. "old" came first but ran 2 GPU-hours
    (level 2), "mid" ran 1 (level 1), "new" none (level 0): new and mid start; FIFO would
    have started old and mid."""
    pending = [
        job("old").submitted(0).attained(7200),
        job("mid").submitted(50).attained(3600),
        job("new").submitted(100),
    ]
    las = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=2),
            queues=[queue("default").least_attained_service()],
            pending=pending,
        )
    )
    assert admitted(las) == ["mid", "new"]
    (wait,) = las.waiting
    assert wait.job_id == "old"
    fifo = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=2),
            queues=[queue("default").best_effort()],
            pending=pending,
        )
    )
    assert admitted(fifo) == ["mid", "old"]


def test_a_new_job_preempts_one_that_dropped_levels_during_its_run() -> None:
    """Hand-computed: "long" holds 8 GPUs since 0; at 1,000 s it has 8,000 GPU-s (level 2, it
    started at 0). "short" (level 0) preempts it; in a BestEffortFIFO queue it would wait."""
    base = {
        "nodes": cluster().nodes(1, gpus=8),
        "running": [running("long").on("node-0", gpus=8).started(0)],
        "pending": [job("short").submitted(900).replicas(1, gpu=8)],
        "now": 1000,
    }
    las = schedule(snapshot(queues=[queue("default").least_attained_service()], **base))  # type: ignore[arg-type]
    assert victims(las) == ["long"]
    fifo = schedule(snapshot(queues=[queue("default").best_effort()], **base))  # type: ignore[arg-type]
    assert victims(fifo) == []


@pytest.mark.parametrize(
    ("case", "victim", "preemptor", "now"),
    [
        # Resumed at level 2 (8,000 GPU-s) at 900: at 1,000 it is still level 2: spared.
        ("resumed", running("long").on("node-0", gpus=8).started(900).attained(8000),
         job("short").submitted(950).replicas(1, gpu=8), 1000),
        # Dropped a level, but the waiting job is in the same level (1): spared.
        ("same level", running("long").on("node-0", gpus=8).started(0),
         job("short").submitted(950).replicas(1, gpu=8).attained(7300), 1000),
        # It preempted the waiting job last: never its victim.
        ("its preemptor", running("long").on("node-0", gpus=8).started(0),
         job("short").submitted(950).replicas(1, gpu=8).preempted_by("long"), 1000),
        # Another queue's job: the ground holds only within the preemptor's queue.
        ("other queue", running("long").queue("other").on("node-0", gpus=8).started(0),
         job("short").submitted(950).replicas(1, gpu=8), 1000),
        # Higher priority than the waiting job.
        ("higher priority", running("long").priority(10).on("node-0", gpus=8).started(0),
         job("short").submitted(950).replicas(1, gpu=8), 1000),
    ],
)  # fmt: skip
def test_the_ground_is_bounded(case: str, victim: object, preemptor: object, now: float) -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=8),
            queues=[
                queue("default").least_attained_service(),
                queue("other").least_attained_service(),
            ],
            running=[victim],  # type: ignore[list-item]
            pending=[preemptor],  # type: ignore[list-item]
            now=now,
        )
    )
    assert victims(decisions) == [], case


def test_las_and_fifo_queues_side_by_side_order_without_mixing_keys() -> None:
    """Keys of a LAS queue and of a FIFO queue meet in the fair order's heap (equal standings,
    same submit time): they compare, and each queue keeps its own order."""
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=2),
            queues=[queue("las").least_attained_service().tenant("a"), queue("fifo").tenant("b")],
            pending=[
                job("las-old").queue("las").tenant("a").attained(9000),
                job("las-new").queue("las").tenant("a"),
                job("fifo-1").queue("fifo").tenant("b"),
                job("fifo-2").queue("fifo").tenant("b"),
            ],
        )
    )
    assert admitted(decisions) == ["fifo-1", "las-new"]


def test_the_policy_is_unchanged_without_las_queues_and_wrapped_once() -> None:
    plain = snapshot(queues=[queue("default").best_effort()])
    assert with_queue_strategies(DEFAULT_POLICY, plain.queues) is DEFAULT_POLICY
    las = snapshot(queues=[queue("default").least_attained_service()]).queues
    once = with_queue_strategies(DEFAULT_POLICY, las)
    assert isinstance(once.order_key, LasOrder)
    assert with_queue_strategies(once, las) is once
    quiet = with_queue_strategies(Policy(preemption=False), las)
    assert quiet.may_preempt is None
