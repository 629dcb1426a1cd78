"""A task's node constraint (nodeSelector, required node affinity) limits where the core places
its replicas, says why it waits, and is kept by the forecast."""

from __future__ import annotations

from kiban.scheduler import Decisions, ReasonCode, schedule
from kiban.scheduler.forward import forecast
from kiban.scheduler.node_match import (
    NodeConstraint,
    NodePreference,
    NodeTerm,
    Operator,
    Requirement,
)
from kiban.scheduler.policy import Policy
from kiban.testing import ClusterBuilder, cluster, job, queue, running, snapshot

H100 = NodeConstraint((("gpu.product", "H100"),))
CPU_ONLY = NodeConstraint(terms=(NodeTerm((Requirement("gpu.product", Operator.DOES_NOT_EXIST),)),))


def mixed_cluster() -> ClusterBuilder:
    """node-0 (4 GPUs, unlabelled), h100-0 and h100-1 (8 GPUs each), cpu-0 (no GPU)."""
    return (
        cluster()
        .nodes(1, gpus=4)
        .nodes(2, gpus=8, prefix="h100", labels={"gpu.product": "H100"})
        .nodes(1, gpus=0, prefix="cpu")
    )


def placed(decisions: Decisions, job_id: str) -> list[str]:
    (admit,) = [a for a in decisions.admitted if a.job_id == job_id]
    return [p.node for p in admit.placements]


def test_replicas_go_only_to_nodes_the_constraint_admits() -> None:
    free_to_choose = schedule(
        snapshot(nodes=mixed_cluster(), pending=[job("a").replicas(1, gpu=4)])
    )
    assert placed(free_to_choose, "a") == ["node-0"]  # best fit, without a constraint
    constrained = schedule(
        snapshot(nodes=mixed_cluster(), pending=[job("a").replicas(2, gpu=4, nodes=H100)])
    )
    assert placed(constrained, "a") == ["h100-0", "h100-0"]


def test_each_task_keeps_its_own_constraint() -> None:
    launcher_and_workers = (
        job("mpi").task("launcher", 1, gpu=0, nodes=CPU_ONLY).task("worker", 2, gpu=8, nodes=H100)
    )
    decisions = schedule(snapshot(nodes=mixed_cluster(), pending=[launcher_and_workers]))
    assert placed(decisions, "mpi") == ["cpu-0", "h100-0", "h100-1"]


def test_no_node_matching_says_so_and_names_the_constraint() -> None:
    b200 = NodeConstraint((("gpu.product", "B200"),))
    decisions = schedule(
        snapshot(nodes=mixed_cluster(), pending=[job("a").replicas(1, gpu=1, nodes=b200)])
    )
    (wait,) = decisions.waiting
    assert wait.reason.code is ReasonCode.UNSCHEDULABLE  # no such node at all: it never will
    assert wait.reason.details["limit"] == "node-constraint"
    assert "needs a node matching nodeSelector gpu.product=B200 for a replica of task worker" in (
        wait.reason.message
    )
    assert wait.reason.details["nodes"] == "nodeSelector gpu.product=B200"


def test_matching_nodes_all_cordoned_wait_for_them() -> None:
    nodes = mixed_cluster().cordoned("h100-0", "h100-1")
    decisions = schedule(snapshot(nodes=nodes, pending=[job("a").replicas(1, gpu=1, nodes=H100)]))
    (wait,) = decisions.waiting
    assert wait.reason.code is ReasonCode.NO_NODE_FITS  # they may come back
    assert "node matching its nodeSelector gpu.product=H100 can hold a replica of task worker" in (
        wait.reason.message
    )
    assert wait.reason.details["unschedulable_nodes_that_fit"] == 2


def test_matching_nodes_busy_wait_while_others_take_other_work() -> None:
    decisions = schedule(
        snapshot(
            nodes=mixed_cluster(),
            running_gpus={"h100-0": 8, "h100-1": 8},
            pending=[
                job("on-h100").replicas(1, gpu=4, nodes=H100).submitted(1),
                job("any").submitted(2),
            ],
            queues=[queue("default").best_effort()],  # so the head does not hold the queue
        )
    )
    assert placed(decisions, "any") == ["node-0"]
    (wait,) = decisions.waiting
    assert wait.job_id == "on-h100"
    assert wait.reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert "task worker may only use nodes matching its nodeSelector gpu.product=H100" in (
        wait.reason.message
    )


def test_the_forecast_waits_for_a_matching_node_to_free() -> None:
    snap = snapshot(
        nodes=cluster()
        .nodes(1, gpus=8)
        .nodes(1, gpus=8, prefix="h100", labels={"gpu.product": "H100"}),
        running=[
            running("short").on("node-0", gpus=8).started(0).max_runtime(100),
            running("long").on("h100-0", gpus=8).started(0).max_runtime(1000),
        ],
        pending=[
            job("any").replicas(1, gpu=8).submitted(1),
            job("h100").replicas(1, gpu=8, nodes=H100).submitted(2),
        ],
        now=10,
    )
    starts = forecast(snap, Policy(), resolution=0.0)
    assert starts["any"] == 100.0
    assert starts["h100"] == 1000.0


# -- preferred node affinity ----------------------------------------------------------------
def prefer(weight: int, key: str, value: str) -> tuple[int, NodeTerm]:
    return weight, NodeTerm((Requirement(key, Operator.IN, (value,)),))


PREFER_H100 = NodePreference((prefer(10, "gpu.product", "H100"),))


def test_a_preference_puts_the_nodes_it_scores_first_over_best_fit() -> None:
    decisions = schedule(
        snapshot(nodes=mixed_cluster(), pending=[job("a").replicas(1, gpu=4, prefers=PREFER_H100)])
    )
    assert placed(decisions, "a") == ["h100-0"]  # best fit alone takes node-0 (4 GPUs)


def test_heavier_terms_win_and_best_fit_decides_among_equals() -> None:
    nodes = (
        cluster()
        .nodes(1, gpus=8, prefix="a", labels={"zone": "a"})
        .nodes(1, gpus=8, prefix="b", labels={"zone": "b", "disk": "nvme"})
        .nodes(1, gpus=4, prefix="c", labels={"zone": "b", "disk": "nvme"})
    )
    prefers = NodePreference(
        (prefer(5, "zone", "a"), prefer(3, "zone", "b"), prefer(3, "disk", "nvme"))
    )
    decisions = schedule(
        snapshot(nodes=nodes, pending=[job("j").replicas(1, gpu=2, prefers=prefers)])
    )
    assert placed(decisions, "j") == ["c-0"]  # 6 beats a-0's 5; c-0 fits tighter than b-0


def test_a_preference_that_cannot_be_had_falls_back_to_other_nodes() -> None:
    decisions = schedule(
        snapshot(
            nodes=mixed_cluster(),
            running_gpus={"h100-0": 8, "h100-1": 8},
            pending=[job("a").replicas(1, gpu=4, prefers=PREFER_H100)],
        )
    )
    assert placed(decisions, "a") == ["node-0"]  # preferred, not required


def test_a_preference_orders_only_the_nodes_the_constraint_admits() -> None:
    prefers_unlabelled = NodePreference((prefer(50, "kubernetes.io/hostname", "node-0"),))
    decisions = schedule(
        snapshot(
            nodes=mixed_cluster(),
            pending=[job("a").replicas(2, gpu=4, nodes=H100, prefers=prefers_unlabelled)],
        )
    )
    assert placed(decisions, "a") == ["h100-0", "h100-0"]


def test_a_preference_orders_the_nodes_of_the_topology_domain_chosen() -> None:
    """The domain is chosen as before (the smallest that holds the gang); inside it the
    preference orders the nodes."""
    nodes = (
        cluster()
        .nodes(4, gpus=8, prefix="b0n", topology=("b0",), labels={"fast": "yes"})
        .node("b1n-0", gpus=8, topology=("b1", "b1n-0"))
        .node("b1n-1", gpus=8, topology=("b1", "b1n-1"), labels={"fast": "yes"})
    )
    prefers = NodePreference((prefer(1, "fast", "yes"),))
    pending = [job("g").replicas(1, gpu=8, prefers=prefers).topology("block")]
    decisions = schedule(snapshot(nodes=nodes, pending=pending, topology_levels=("block", "host")))
    assert placed(decisions, "g") == ["b1n-1"]  # best fit alone takes b1n-0
