"""A task's replicas per node (``maxReplicasPerNode``): placement, gangs, topology, preemption,
reservations and forecasts honour it, and a job waits saying how many nodes it lacks."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import pytest

from kiban.scheduler import Decisions, ReasonCode, Snapshot, schedule
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.forward import forecast
from kiban.scheduler.node_match import NodeConstraint
from kiban.scheduler.policy import Policy
from kiban.testing import cluster, job, queue, running, snapshot
from kiban.testing.builders import JobBuilder


def placed(decisions: Decisions, job_id: str) -> list[str]:
    (admit,) = [a for a in decisions.admitted if a.job_id == job_id]
    return [p.node for p in admit.placements]


def per_node(decisions: Decisions, job_id: str, task: str = "worker") -> Counter[str]:
    (admit,) = [a for a in decisions.admitted if a.job_id == job_id]
    return Counter(p.node for p in admit.placements if p.task == task)


@dataclass
class Case:
    id: str
    snap: Snapshot
    placed: dict[str, list[str]] = field(default_factory=dict)  # job -> nodes in rank order
    waiting: dict[str, ReasonCode] = field(default_factory=dict)


CASES = [
    Case(
        "one-per-node-spreads-what-best-fit-would-pack",
        snapshot(
            nodes=cluster().nodes(3, gpus=8),
            pending=[job("ddp").replicas(3, gpu=1, max_per_node=1)],
        ),
        placed={"ddp": ["node-0", "node-1", "node-2"]},
    ),
    Case(
        "without-a-limit-best-fit-packs-one-node",
        snapshot(nodes=cluster().nodes(3, gpus=8), pending=[job("ddp").replicas(3, gpu=1)]),
        placed={"ddp": ["node-0", "node-0", "node-0"]},
    ),
    Case(
        "cpu-only-ranks-spread-too",
        snapshot(
            nodes=cluster().nodes(3, gpus=0),
            pending=[job("cpu").replicas(3, gpu=0, max_per_node=1)],
        ),
        placed={"cpu": ["node-0", "node-1", "node-2"]},
    ),
    Case(
        "two-per-node-fills-each-node-to-its-limit",
        snapshot(
            nodes=cluster().nodes(3, gpus=8),
            pending=[job("pairs").replicas(4, gpu=1, max_per_node=2)],
        ),
        placed={"pairs": ["node-0", "node-0", "node-1", "node-1"]},
    ),
    Case(
        "best-fit-among-the-nodes-left",
        snapshot(
            nodes=cluster().nodes(3, gpus=4),
            pending=[job("ddp").replicas(2, gpu=1, max_per_node=1)],
            running_gpus={"node-1": 3, "node-2": 2},
        ),
        placed={"ddp": ["node-1", "node-2"]},
    ),
    Case(
        "busy-nodes-make-it-wait",
        snapshot(
            nodes=cluster().nodes(3, gpus=1),
            pending=[job("ddp").replicas(3, gpu=1, max_per_node=1)],
            running_gpus={"node-2": 1},
        ),
        waiting={"ddp": ReasonCode.INSUFFICIENT_CAPACITY},
    ),
    Case(
        "too-few-nodes-ever-is-unschedulable",
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            pending=[job("ddp").replicas(3, gpu=1, max_per_node=1)],
        ),
        waiting={"ddp": ReasonCode.UNSCHEDULABLE},
    ),
    Case(
        "an-unschedulable-head-holds-up-nobody",
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[queue("q").strict()],
            pending=[
                job("wide").queue("q").replicas(3, gpu=1, max_per_node=1).submitted(1),
                job("behind").queue("q").replicas(2, gpu=1, max_per_node=1).submitted(2),
            ],
        ),
        placed={"behind": ["node-0", "node-1"]},
        waiting={"wide": ReasonCode.UNSCHEDULABLE},
    ),
    Case(
        "a-failed-spread-gang-leaves-nothing-behind",
        snapshot(
            nodes=cluster().nodes(2, gpus=2),
            queues=[queue("q").best_effort()],
            pending=[
                job("wide").queue("q").replicas(2, gpu=1, max_per_node=1).submitted(1),
                job("whole").queue("q").replicas(1, gpu=2).submitted(2),
            ],
            running_gpus={"node-1": 2},
        ),
        placed={"whole": ["node-0"]},
        waiting={"wide": ReasonCode.INSUFFICIENT_CAPACITY},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_spread_cases(case: Case) -> None:
    decisions = schedule(case.snap)
    assert {a.job_id: [p.node for p in a.placements] for a in decisions.admitted} == case.placed
    assert {w.job_id: w.reason.code for w in decisions.waiting} == case.waiting


def test_the_limit_holds_within_a_task_not_across_tasks() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            pending=[
                job("mpi")
                .task("launcher", 2, gpu=1, max_per_node=1)
                .task("worker", 2, gpu=1, max_per_node=1)
            ],
        )
    )
    assert per_node(decisions, "mpi", "launcher") == {"node-0": 1, "node-1": 1}
    assert per_node(decisions, "mpi", "worker") == {"node-0": 1, "node-1": 1}


def test_a_waiting_spread_job_says_how_many_nodes_it_lacks() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(3, gpus=1),
            pending=[job("ddp").replicas(3, gpu=1, max_per_node=1)],
            running_gpus={"node-2": 1},
        )
    )
    (wait,) = decisions.waiting
    assert wait.reason.message == (
        "needs 3 nodes with 1 free GPU each for one replica per node; 2 such nodes now"
    )
    assert wait.reason.details == {
        "flavor": "default",
        "task": "worker",
        "max_replicas_per_node": 1,
        "nodes_needed": 3,
        "nodes_with_room": 2,
    }


def test_a_spread_job_that_never_fits_says_so_with_numbers() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            pending=[job("ddp").replicas(3, gpu=1, max_per_node=1)],
        )
    )
    (wait,) = decisions.waiting
    assert wait.reason.message == (
        "can never start: needs 3 nodes with 1 free GPU each for one replica per node (task "
        "worker); only 2 such nodes exist"
    )
    assert wait.reason.details["limit"] == "spread"
    assert wait.reason.details["nodes_with_room"] == 2


def test_a_required_topology_domain_needs_enough_nodes_for_the_spread() -> None:
    """Nine 2-node blocks have the fewest free GPUs, so without counting nodes the eight
    domains tried would all be too narrow for three replicas one per node."""
    nodes = cluster()
    for b in range(9):
        nodes.nodes(2, gpus=8, prefix=f"small{b}", topology=(f"small{b}",))
    nodes.nodes(4, gpus=8, prefix="wide", topology=("wide",))
    decisions = schedule(
        snapshot(
            nodes=nodes,
            pending=[job("ddp").replicas(3, gpu=1, max_per_node=1).topology("block")],
            topology_levels=("block", "host"),
        )
    )
    assert placed(decisions, "ddp") == ["wide-0", "wide-1", "wide-2"]


def test_preemption_frees_the_nodes_a_spread_needs() -> None:
    """Two free GPUs on node-1 hold the job packed, not one per node: the low job on node-0
    must go."""
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=2),
            running=[running("low").priority(1).on("node-0", gpus=2)],
            pending=[job("urgent").priority(10).preempts().replicas(2, gpu=1, max_per_node=1)],
            now=100,
        )
    )
    assert [p.victim_id for p in decisions.preempted] == ["low"]
    assert decisions.preempted[0].nodes == ("node-0", "node-1")


def test_no_preemption_for_a_spread_that_victims_cannot_make_room_for() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(3, gpus=2),
            running=[running("low").priority(1).on("node-0", gpus=2)],
            pending=[job("urgent").priority(10).preempts().replicas(4, gpu=1, max_per_node=1)],
            now=100,
        )
    )
    assert decisions.preempted == ()
    assert decisions.waiting[0].reason.code is ReasonCode.UNSCHEDULABLE


def test_the_forecast_waits_for_a_node_the_spread_needs() -> None:
    def start(pending: JobBuilder) -> float | None:
        snap = snapshot(
            nodes=cluster().nodes(2, gpus=2),
            running=[running("r").on("node-0", gpus=2).max_runtime(100)],
            pending=[pending],
        )
        return forecast(snap, Policy())[pending.id]

    assert start(job("packed").replicas(2, gpu=1)) == 0.0  # both on node-1 now
    assert start(job("spread").replicas(2, gpu=1, max_per_node=1)) == 100.0


def test_a_reservation_is_made_on_distinct_nodes() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=2),
            running=[running("r").on("node-0", gpus=2).max_runtime(600)],
            pending=[job("spread").replicas(2, gpu=1, max_per_node=1)],
        )
    )
    (wait,) = decisions.waiting
    assert wait.reason.code is ReasonCode.WAITING_FOR_RESERVATION
    assert wait.reason.details["nodes"] == ["node-0", "node-1"]
    assert wait.reason.message == (
        "needs 2 GPUs together; reserved on 2 nodes starting in 10m, when running jobs reach "
        "their maxRuntime"
    )


def test_a_failure_limited_to_some_nodes_says_nothing_of_a_job_that_may_use_others() -> None:
    """The failed-shape memo of a cycle kept jobs limited to some nodes and jobs that are not
    apart: after one limited to absent nodes failed, a same-sized job without a limit waited
    although a node was free."""
    special = NodeConstraint((("kind", "special"),))
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=1),
            queues=[queue("q").best_effort()],
            pending=[
                job("picky").queue("q").replicas(1, nodes=special).submitted(1),
                job("any").queue("q").submitted(2),
            ],
        )
    )
    assert placed(decisions, "any") == ["node-0"]


def test_a_tighter_spread_is_remembered_as_harder_not_easier() -> None:
    """After a spread job fails, a packed job of the same size may still fit."""
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=2),
            queues=[queue("q").best_effort()],
            pending=[
                job("wide").queue("q").replicas(2, gpu=1, max_per_node=1).submitted(1),
                job("packed").queue("q").replicas(2, gpu=1).submitted(2),
            ],
            running_gpus={"node-0": 2},
        )
    )
    assert placed(decisions, "packed") == ["node-1", "node-1"]


def test_a_kept_capacity_cache_sees_nodes_leave_and_come_back() -> None:
    """The nodes as if idle (and each job's verdict on them) are kept across cycles; a node
    that leaves, or changes, makes them be worked out again."""
    cache = CapacityCache()
    pending = [job("ddp").replicas(3, gpu=1, max_per_node=1)]
    three = cluster().nodes(3, gpus=1)
    busy = {"node-2": 1}
    first = schedule(snapshot(nodes=three, pending=pending, running_gpus=busy), cache=cache)
    assert first.waiting[0].reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    two = tuple(n for n in three.build(busy) if n.name != "node-2")
    second = schedule(snapshot(nodes=two, pending=pending), cache=cache)
    assert second.waiting[0].reason.code is ReasonCode.UNSCHEDULABLE
    relabelled = tuple(replace(n, labels={"zone": "a"}) for n in two)
    third = schedule(snapshot(nodes=relabelled, pending=pending), cache=cache)
    assert third.waiting[0].reason.code is ReasonCode.UNSCHEDULABLE
    back = schedule(snapshot(nodes=cluster().nodes(3, gpus=1), pending=pending), cache=cache)
    assert placed(back, "ddp") == ["node-0", "node-1", "node-2"]


def test_a_kept_verdict_is_judged_again_when_the_quota_changes() -> None:
    cache = CapacityCache()
    pending = [job("ddp").queue("q").replicas(3, gpu=1, max_per_node=1)]
    nodes = cluster().nodes(3, gpus=1)
    small = schedule(
        snapshot(nodes=nodes, queues=[queue("q").quota(2)], pending=pending), cache=cache
    )
    assert small.waiting[0].reason.details["limit"] == "quota"
    large = schedule(
        snapshot(nodes=nodes, queues=[queue("q").quota(3)], pending=pending), cache=cache
    )
    assert placed(large, "ddp") == ["node-0", "node-1", "node-2"]
