"""A task's node constraint (nodeSelector, required node affinity) limits where the core places
its replicas, says why it waits, and is kept by the forecast."""

from __future__ import annotations

from kiban.scheduler import Decisions, ReasonCode, schedule
from kiban.scheduler.forward import forecast
from kiban.scheduler.node_match import NodeConstraint, NodeTerm, Operator, Requirement
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
    assert wait.reason.code is ReasonCode.NO_NODE_FITS
    assert "node matching its nodeSelector gpu.product=B200 can hold a replica of task worker" in (
        wait.reason.message
    )
    assert wait.reason.details["nodes"] == "nodeSelector gpu.product=B200"


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
