"""One scheduling cycle, case by case: order, queues, quotas, gangs, best fit, node health."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kiban.scheduler import Decisions, ReasonCode, Snapshot, Wait, schedule
from kiban.scheduler.forward import advance, forecast
from kiban.scheduler.policy import Policy
from kiban.testing import ClusterBuilder, cluster, job, queue, running, snapshot


def admitted_ids(decisions: Decisions) -> list[str]:
    return [a.job_id for a in decisions.admitted]


def waits(decisions: Decisions) -> dict[str, Wait]:
    return {w.job_id: w for w in decisions.waiting}


def codes(decisions: Decisions) -> dict[str, ReasonCode]:
    return {w.job_id: w.reason.code for w in decisions.waiting}


def nodes_of(decisions: Decisions, job_id: str) -> list[str]:
    (admit,) = [a for a in decisions.admitted if a.job_id == job_id]
    return [p.node for p in admit.placements]


# -- order within a queue --------------------------------------------------------------------


@dataclass
class OrderCase:
    id: str
    snap: Snapshot
    admitted: list[str]
    waiting: dict[str, ReasonCode] = field(default_factory=dict)


ORDER_CASES = [
    OrderCase(
        "first-come-first-served",
        snapshot(
            nodes=cluster().nodes(1, gpus=1),
            pending=[job("late").submitted(2.0), job("early").submitted(1.0)],
        ),
        admitted=["early"],
        waiting={"late": ReasonCode.INSUFFICIENT_CAPACITY},
    ),
    OrderCase(
        "higher-priority-first-even-if-later",
        snapshot(
            nodes=cluster().nodes(1, gpus=1),
            pending=[job("old").submitted(1.0), job("urgent").priority(10).submitted(9.0)],
        ),
        admitted=["urgent"],
        waiting={"old": ReasonCode.INSUFFICIENT_CAPACITY},
    ),
    OrderCase(
        "ties-broken-by-id",
        snapshot(
            nodes=cluster().nodes(1, gpus=1),
            pending=[job("b").submitted(1.0), job("a").submitted(1.0)],
        ),
        admitted=["a"],
        waiting={"b": ReasonCode.INSUFFICIENT_CAPACITY},
    ),
    OrderCase(
        "strict-head-blocks-smaller-job",
        snapshot(
            nodes=cluster().nodes(2, gpus=2),
            queues=[queue("q").strict()],
            pending=[
                job("big").queue("q").replicas(2, gpu=2).submitted(1.0),
                job("small").queue("q").replicas(1, gpu=1).submitted(2.0),
            ],
            running_gpus={"node-0": 1},
        ),
        admitted=[],
        waiting={
            "big": ReasonCode.INSUFFICIENT_CAPACITY,
            "small": ReasonCode.BLOCKED_BY_QUEUE_HEAD,
        },
    ),
    OrderCase(
        "best-effort-lets-smaller-job-pass",
        snapshot(
            nodes=cluster().nodes(2, gpus=2),
            queues=[queue("q").best_effort()],
            pending=[
                job("big").queue("q").replicas(2, gpu=2).submitted(1.0),
                job("small").queue("q").replicas(1, gpu=1).submitted(2.0),
            ],
            running_gpus={"node-0": 1},
        ),
        admitted=["small"],
        waiting={"big": ReasonCode.INSUFFICIENT_CAPACITY},
    ),
    OrderCase(
        "strict-head-does-not-block-other-queues",
        snapshot(
            nodes=cluster().nodes(1, gpus=2),
            queues=[queue("q").strict(), queue("other").strict()],
            pending=[
                job("big").queue("q").replicas(1, gpu=2).submitted(1.0),
                job("behind").queue("q").replicas(1, gpu=1).submitted(2.0),
                job("elsewhere").queue("other").replicas(1, gpu=1).submitted(3.0),
            ],
            running_gpus={"node-0": 1},
        ),
        admitted=["elsewhere"],
        waiting={
            "big": ReasonCode.INSUFFICIENT_CAPACITY,
            "behind": ReasonCode.BLOCKED_BY_QUEUE_HEAD,
        },
    ),
    OrderCase(
        "strict-queue-admits-in-order-while-it-fits",
        snapshot(
            nodes=cluster().nodes(1, gpus=4),
            queues=[queue("q").strict()],
            pending=[job(f"j{i}").queue("q").submitted(float(i)) for i in range(6)],
        ),
        admitted=["j0", "j1", "j2", "j3"],
        waiting={"j4": ReasonCode.INSUFFICIENT_CAPACITY, "j5": ReasonCode.BLOCKED_BY_QUEUE_HEAD},
    ),
]


@pytest.mark.parametrize("case", ORDER_CASES, ids=lambda c: c.id)
def test_order_within_queues(case: OrderCase) -> None:
    decisions = schedule(case.snap)
    assert admitted_ids(decisions) == case.admitted
    assert codes(decisions) == case.waiting


def test_blocked_job_names_the_head_of_its_queue() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=1),
            queues=[queue("q").strict()],
            pending=[
                job("head").queue("q").replicas(1, gpu=1),
                job("next").queue("q").submitted(1),
            ],
            running_gpus={"node-0": 1},
        )
    )
    reason = waits(decisions)["next"].reason
    assert reason.code is ReasonCode.BLOCKED_BY_QUEUE_HEAD
    assert reason.details == {"queue": "q", "head": "head"}
    assert "head" in reason.message


# -- quotas ----------------------------------------------------------------------------------


def test_quota_exhausted_carries_the_numbers() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(4, gpus=2),
            queues=[queue("q").quota(4).using(2)],
            pending=[job("a").queue("q").replicas(2, gpu=2)],
        )
    )
    assert admitted_ids(decisions) == []
    reason = waits(decisions)["a"].reason
    assert reason.code is ReasonCode.QUEUE_QUOTA_EXHAUSTED
    assert reason.details == {
        "queue": "q",
        "flavor": "default",
        "needed_gpus": 4,
        "nominal_gpus": 4,
        "in_use_gpus": 2,
        "free_gpus": 2,
    }
    assert reason.message == "needs 4 GPUs; queue q has 2 free of 4"


def test_job_larger_than_the_whole_quota() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(4, gpus=2),
            queues=[queue("q").quota(4)],
            pending=[job("a").queue("q").replicas(3, gpu=2)],
        )
    )
    reason = waits(decisions)["a"].reason
    assert reason.code is ReasonCode.UNSCHEDULABLE  # a quota it can never get holds nobody up
    assert reason.details["limit"] == "quota"
    assert reason.details["needed_gpus"] == 6
    assert reason.details["nominal_gpus"] == 4
    assert "can never hold more than 4" in reason.message


def test_quota_counts_admissions_made_in_the_same_cycle() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(4, gpus=2),
            queues=[queue("q").quota(4).best_effort()],
            pending=[job(f"j{i}").queue("q").replicas(1, gpu=2).submitted(i) for i in range(3)],
        )
    )
    assert admitted_ids(decisions) == ["j0", "j1"]
    reason = waits(decisions)["j2"].reason
    assert reason.code is ReasonCode.QUEUE_QUOTA_EXHAUSTED
    assert reason.details["in_use_gpus"] == 4


def test_quota_is_per_queue_and_ignores_cpu_only_jobs() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=2),
            queues=[queue("full").quota(2).using(2), queue("free").quota(2)],
            pending=[
                job("cpu-only").queue("full").replicas(1, gpu=0),
                job("gpu").queue("free").replicas(1, gpu=2),
            ],
        )
    )
    assert sorted(admitted_ids(decisions)) == ["cpu-only", "gpu"]


def test_zero_quota_admits_no_gpu_job() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=8),
            queues=[queue("q").quota(0)],
            pending=[job("a").queue("q").replicas(1, gpu=1)],
        )
    )
    assert codes(decisions) == {"a": ReasonCode.UNSCHEDULABLE}


# -- gangs -----------------------------------------------------------------------------------


def test_gang_that_does_not_fit_takes_nothing() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(3, gpus=2),
            pending=[job("gang").replicas(3, gpu=2)],
            running_gpus={"node-2": 2},
        )
    )
    assert decisions.admitted == ()
    reason = waits(decisions)["gang"].reason
    assert reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert reason.details == {
        "flavor": "default",
        "gang_size": 3,
        "placeable_now": 2,
        "free_gpus": 4,
        "needed_gpus": 6,
    }
    assert "only 2 fit now" in reason.message


def test_failed_gang_leaves_its_capacity_to_the_next_job() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=2),
            queues=[queue("q").best_effort()],
            pending=[
                job("gang").queue("q").replicas(3, gpu=2).submitted(1),
                job("pair").queue("q").replicas(2, gpu=2).submitted(2),
            ],
        )
    )
    assert admitted_ids(decisions) == ["pair"]
    assert nodes_of(decisions, "pair") == ["node-0", "node-1"]
    (admit,) = decisions.admitted
    assert [p.gpu_ids for p in admit.placements] == [(0, 1), (0, 1)]


def test_min_available_admits_a_partial_gang() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=2),
            pending=[job("elastic").replicas(3, gpu=2).gang(2)],
        )
    )
    (admit,) = decisions.admitted
    assert admit.job_id == "elastic"
    assert len(admit.placements) >= 2
    assert [p.rank for p in admit.placements] == list(range(len(admit.placements)))


def test_min_available_still_needs_its_gang() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(3, gpus=2),
            pending=[job("elastic").replicas(4, gpu=2).gang(3)],
            running_gpus={"node-2": 2},
        )
    )
    assert decisions.admitted == ()
    assert waits(decisions)["elastic"].reason.details["placeable_now"] == 2


def test_ranks_follow_tasks_in_order() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(3, gpus=2),
            pending=[job("mpi").task("launcher", 1, gpu=0).task("worker", 2, gpu=2)],
        )
    )
    (admit,) = decisions.admitted
    assert [(p.task, p.index, p.rank) for p in admit.placements] == [
        ("launcher", 0, 0),
        ("worker", 0, 1),
        ("worker", 1, 2),
    ]


# -- best fit and GPU ids --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "running", "expected_node", "expected_ids"),
    [
        pytest.param(
            cluster().node("big", gpus=8).node("small", gpus=2), {}, "small", (0, 1), id="smaller"
        ),
        pytest.param(
            cluster().node("a", gpus=4).node("b", gpus=4),
            {"b": 2},
            "b",
            (2, 3),
            id="fewest-left-over",
        ),
        pytest.param(
            cluster().node("b", gpus=4).node("a", gpus=4), {}, "a", (0, 1), id="ties-by-name"
        ),
        pytest.param(
            cluster().node("a", gpus=4).node("b", gpus=8),
            {"a": [0, 2]},
            "a",
            (1, 3),
            id="only-free-ids",
        ),
    ],
)
def test_best_fit(
    nodes: ClusterBuilder,
    running: dict[str, int | list[int]],
    expected_node: str,
    expected_ids: tuple[int, ...],
) -> None:
    snap = snapshot(nodes=nodes, pending=[job("j").replicas(1, gpu=2)], running_gpus=running)
    (admit,) = schedule(snap).admitted
    (placement,) = admit.placements
    assert (placement.node, placement.gpu_ids) == (expected_node, expected_ids)


def test_best_fit_skips_nodes_short_of_cpu_or_memory() -> None:
    nodes = cluster().node("a", gpus=2, cpu_millis=1000).node("b", gpus=8, cpu_millis=64_000)
    decisions = schedule(
        snapshot(nodes=nodes, pending=[job("j").replicas(1, gpu=2, cpu_millis=4000)])
    )
    assert nodes_of(decisions, "j") == ["b"]


def test_gpu_ids_are_distinct_per_node_and_never_reused() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=4),
            queues=[queue("default").best_effort()],
            pending=[
                job(f"j{i}").replicas(n, gpu=1).submitted(i) for i, n in enumerate([2, 2, 1, 1])
            ],
            running_gpus={"node-0": [1], "node-1": [0, 3]},
        )
    )
    used = {("node-0", 1), ("node-1", 0), ("node-1", 3)}
    for admit in decisions.admitted:
        for p in admit.placements:
            for gpu in p.gpu_ids:
                assert (p.node, gpu) not in used
                used.add((p.node, gpu))
    assert len(used) == 8  # every GPU is now taken exactly once
    assert codes(decisions) == {"j3": ReasonCode.INSUFFICIENT_CAPACITY}


# -- node health -----------------------------------------------------------------------------


def test_cordoned_and_unhealthy_nodes_get_nothing() -> None:
    nodes = (
        cluster()
        .nodes(3, gpus=2)
        .cordoned("node-0")
        .unhealthy("node-2", message="Xid 79: GPU has fallen off the bus")
    )
    decisions = schedule(
        snapshot(nodes=nodes, pending=[job(f"j{i}").submitted(i) for i in range(3)])
    )
    placed = {p.node for a in decisions.admitted for p in a.placements}
    assert placed == {"node-1"}
    assert admitted_ids(decisions) == ["j0", "j1"]
    assert codes(decisions) == {"j2": ReasonCode.INSUFFICIENT_CAPACITY}


def test_no_node_fits_names_the_cordoned_count() -> None:
    nodes = cluster().nodes(2, gpus=2).node("big", gpus=8).cordoned("big")
    decisions = schedule(snapshot(nodes=nodes, pending=[job("j").replicas(1, gpu=4)]))
    reason = waits(decisions)["j"].reason
    assert reason.code is ReasonCode.NO_NODE_FITS
    assert reason.details == {
        "flavor": "default",
        "task": "worker",
        "gpu": 4,
        "unschedulable_nodes_that_fit": 1,
    }
    assert "1 node(s) that could are cordoned or unhealthy" in reason.message


def test_a_replica_larger_than_every_node_can_never_start() -> None:
    decisions = schedule(
        snapshot(nodes=cluster().nodes(2, gpus=2), pending=[job("j").replicas(1, gpu=3)])
    )
    reason = waits(decisions)["j"].reason
    assert reason.code is ReasonCode.UNSCHEDULABLE
    assert reason.details["limit"] == "node-size"
    assert reason.message == (
        "can never start: needs a node that can hold a replica of task worker (3 GPUs, 1 CPU, "
        "1 GiB of memory); the largest node has 2 GPUs, 64 CPUs and 512 GiB of memory"
    )


# -- positions and unknown queues ------------------------------------------------------------


def test_queue_positions_are_one_based_per_queue() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=1),
            queues=[queue("a").best_effort(), queue("b").best_effort()],
            pending=[
                job("a1").queue("a").submitted(1),
                job("b1").queue("b").submitted(2),
                job("a2").queue("a").submitted(3),
                job("b2").queue("b").submitted(4),
                job("a3").queue("a").submitted(5),
            ],
            running_gpus={"node-0": 1},
        )
    )
    positions = {w.job_id: w.queue_position for w in decisions.waiting}
    assert positions == {"a1": 1, "a2": 2, "a3": 3, "b1": 1, "b2": 2}
    assert [w.job_id for w in decisions.waiting] == ["a1", "b1", "a2", "b2", "a3"]


def test_positions_count_only_jobs_still_waiting() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=2),
            queues=[queue("q").best_effort()],
            pending=[
                job("big").queue("q").replicas(1, gpu=2).submitted(1),
                job("small").queue("q").replicas(1, gpu=1).submitted(2),
                job("last").queue("q").replicas(1, gpu=2).submitted(3),
            ],
            running_gpus={"node-0": 1},
        )
    )
    assert admitted_ids(decisions) == ["small"]
    assert {w.job_id: w.queue_position for w in decisions.waiting} == {"big": 1, "last": 2}


def test_unknown_queue() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=1),
            queues=[queue("q")],
            pending=[job("lost").queue("gone").submitted(1), job("ok").queue("q").submitted(2)],
        )
    )
    assert admitted_ids(decisions) == ["ok"]
    reason = waits(decisions)["lost"].reason
    assert reason.code is ReasonCode.QUEUE_NOT_FOUND
    assert reason.details == {"queue": "gone"}
    assert waits(decisions)["lost"].queue_position == 1


def test_empty_snapshot_decides_nothing() -> None:
    assert schedule(snapshot(nodes=cluster().nodes(2, gpus=2))) == Decisions((), ())


def test_reason_serializes_for_the_store() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=1),
            pending=[job("j").replicas(2)],
            running_gpus={"node-1": 1},
        )
    )
    data = waits(decisions)["j"].reason.as_dict()
    assert data["code"] == "InsufficientCapacity"
    assert data["details"]["gang_size"] == 2
    assert isinstance(data["message"], str)


# -- the placement budget of a cycle -------------------------------------------------------------


def test_a_cycle_stops_at_its_placement_budget_and_the_next_goes_on() -> None:
    """Five 2-replica jobs, a budget of 4 replicas: two jobs per cycle, in order, and the jobs
    not reached wait unconsidered, keeping their order for the next cycle."""
    snap = snapshot(
        nodes=cluster().nodes(10, gpus=1),
        pending=[job(f"j{i}").replicas(2, gpu=1).submitted(float(i)) for i in range(5)],
    )
    policy = Policy(max_placements_per_cycle=4)
    first = schedule(snap, policy)
    assert admitted_ids(first) == ["j0", "j1"]
    assert first.more
    assert [(w.job_id, w.reason.code) for w in first.waiting] == [
        ("j2", ReasonCode.QUEUE_BACKLOG),
        ("j3", ReasonCode.QUEUE_BACKLOG),
        ("j4", ReasonCode.QUEUE_BACKLOG),
    ]
    assert "placing 4 replicas" in first.waiting[0].reason.message
    second = schedule(advance(snap, first), policy)
    assert admitted_ids(second) == ["j2", "j3"]
    third = schedule(advance(advance(snap, first), second), policy)
    assert admitted_ids(third) == ["j4"]
    assert not third.more


def test_the_forecast_runs_budgeted_cycles_at_the_same_time() -> None:
    """Jobs that a budget-cut cycle did not reach can start now: their estimate is now."""
    snap = snapshot(
        nodes=cluster().nodes(6, gpus=1),
        pending=[job(f"j{i}").replicas(1, gpu=1).max_runtime(100).submitted(i) for i in range(8)],
        now=10.0,
    )
    starts = forecast(snap, Policy(max_placements_per_cycle=2))
    assert [starts[f"j{i}"] for i in range(8)] == [10.0] * 6 + [110.0, 110.0]


def test_the_forecast_takes_close_ends_together_never_early() -> None:
    """Ends within 2 % of the time ahead finish in one step, at the last of them: an estimate
    may be that much late, never early."""
    snap = snapshot(
        nodes=cluster().nodes(2, gpus=1),
        running=[
            running("a").on("node-0", gpus=1).started(0).max_runtime(1000),
            running("b").on("node-1", gpus=1).started(0).max_runtime(1010),
        ],
        pending=[job("one").replicas(1, gpu=1).submitted(1)],
        now=10,
    )
    assert forecast(snap, Policy())["one"] == 1010.0  # 1000 and 1010 are within 2 % of 990 s
    assert forecast(snap, Policy(), resolution=0.0)["one"] == 1000.0
