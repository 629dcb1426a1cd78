"""ShortestExpectedService queues: the smallest expected GPU-seconds first (Helios' QSSF)."""

from __future__ import annotations

import math

from kiban.scheduler import Decisions, schedule
from kiban.scheduler.attained_service import LasOrder, with_queue_strategies
from kiban.scheduler.expected_service import expected_service
from kiban.scheduler.policy import DEFAULT_POLICY
from kiban.testing import cluster, job, queue, snapshot
from kiban.testing.job_builders import JobBuilder


def admitted(decisions: Decisions) -> list[str]:
    return sorted(a.job_id for a in decisions.admitted)


def pending(queue_name: str = "default") -> list[JobBuilder]:
    """Fresh builders (they are mutable) for the four jobs, in queue ``queue_name``."""
    return [
        job("big").queue(queue_name).submitted(0).replicas(1, gpu=2).estimated_runtime(5000),
        job("unknown").queue(queue_name).submitted(10),
        job("mid").queue(queue_name).submitted(20).estimated_runtime(2000),
        job("small").queue(queue_name).submitted(30).max_runtime(600),
    ]


def test_expected_service_is_gpus_times_the_declared_or_estimated_run_time() -> None:
    big, unknown, mid, small = (p.build() for p in pending())
    assert expected_service(big) == 10_000  # 2 GPUs x 5,000 s estimated
    assert expected_service(small) == 600  # declared maxRuntime wins over any estimate
    assert expected_service(mid) == 2_000
    assert expected_service(unknown) == math.inf


def test_the_smallest_expected_jobs_start_first_whatever_came_first() -> None:
    """Hand-computed, 2 free GPUs: big (10,000 GPU-s, first come), unknown (nothing known),
    mid (2,000), small (600). small and mid start; a BestEffortFIFO queue starts big."""
    nodes = cluster().nodes(1, gpus=2)
    qssf = schedule(
        snapshot(
            nodes=nodes, queues=[queue("default").shortest_expected_service()], pending=pending()
        )
    )
    assert admitted(qssf) == ["mid", "small"]
    fifo = schedule(
        snapshot(nodes=nodes, queues=[queue("default").best_effort()], pending=pending())
    )
    assert admitted(fifo) == ["big"]


def test_the_order_ranks_by_size_and_leaves_other_queues_first_come() -> None:
    """In the ShortestExpectedService queue: small, mid, big, unknown. In a BestEffortFIFO
    queue beside it, the same jobs keep first come; no preemption ground is added."""
    queues = [
        queue("qssf").shortest_expected_service().build(),
        queue("fifo").best_effort().build(),
    ]
    policy = with_queue_strategies(DEFAULT_POLICY, queues)
    assert isinstance(policy.order_key, LasOrder)
    assert policy.may_preempt is None
    for name, expected in [
        ("qssf", ["small", "mid", "big", "unknown"]),
        ("fifo", ["big", "unknown", "mid", "small"]),
    ]:
        jobs = [p.build() for p in pending(name)]
        assert [j.id for j in sorted(jobs, key=policy.order_key)] == expected
    assert with_queue_strategies(policy, queues) is policy
