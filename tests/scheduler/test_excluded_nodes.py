"""Nodes a job must keep off (one that failed its preflight): placement, gangs, topology,
preemption, backfill and forecasts honour them, and a job they keep waiting says so."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kiban.scheduler import ReasonCode, Snapshot, schedule
from kiban.scheduler.forward import forecast
from kiban.scheduler.node_match import NodeConstraint, excluding
from kiban.scheduler.policy import Policy
from kiban.testing import cluster, job, running, snapshot

LEVELS = ("block", "host")


@dataclass
class Case:
    id: str
    snap: Snapshot
    placed: dict[str, list[str]] = field(default_factory=dict)  # job -> nodes in rank order
    waiting: dict[str, ReasonCode] = field(default_factory=dict)


CASES = [
    Case(
        "best-fit-passes-over-the-excluded-node",
        snapshot(
            nodes=cluster().nodes(3, gpus=8),
            running_gpus={"node-0": 4},
            pending=[job("ddp").replicas(2, gpu=2).excluding("node-0")],
        ),
        placed={"ddp": ["node-1", "node-1"]},
    ),
    Case(
        "a-gang-spread-one-per-node-uses-the-others",
        snapshot(
            nodes=cluster().nodes(4, gpus=8),
            pending=[job("ddp").replicas(3, gpu=8, max_per_node=1).excluding("node-1")],
        ),
        placed={"ddp": ["node-0", "node-2", "node-3"]},
    ),
    Case(
        "too-few-nodes-left-it-waits",
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            pending=[job("ddp").replicas(2, gpu=8).excluding("node-0")],
        ),
        waiting={"ddp": ReasonCode.UNSCHEDULABLE},
    ),
    Case(
        "every-task-keeps-off-it",
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            pending=[job("mpi").task("launcher", 1, gpu=0).task("worker", 1).excluding("node-0")],
        ),
        placed={"mpi": ["node-1", "node-1"]},
    ),
    Case(
        "other-jobs-still-use-the-node",
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            pending=[
                job("kept").replicas(1, gpu=8).excluding("node-0").submitted(1),
                job("other").replicas(1, gpu=8).submitted(2),
            ],
        ),
        placed={"kept": ["node-1"], "other": ["node-0"]},
    ),
    Case(
        "a-required-block-with-an-excluded-node-is-passed-over",
        snapshot(
            nodes=cluster()
            .nodes(2, gpus=8, prefix="b0n", topology=("b0",))
            .nodes(3, gpus=8, prefix="b1n", topology=("b1",)),
            pending=[job("pair").replicas(2, gpu=8).topology("block").excluding("b0n-1")],
            topology_levels=LEVELS,
        ),
        placed={"pair": ["b1n-0", "b1n-1"]},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_excluded_node_cases(case: Case) -> None:
    decisions = schedule(case.snap)
    assert {a.job_id: [p.node for p in a.placements] for a in decisions.admitted} == case.placed
    assert {w.job_id: w.reason.code for w in decisions.waiting} == case.waiting


def test_a_job_its_exclusions_keep_waiting_names_them_in_its_reason() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            pending=[job("ddp").replicas(2, gpu=8).excluding("node-0")],
        )
    )
    (wait,) = decisions.waiting
    assert "node exclusions (not node-0)" in wait.reason.message
    assert wait.reason.details["excluded_nodes"] == ["node-0"]


def test_a_busy_cluster_reason_names_the_exclusions_too() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(3, gpus=8),
            running_gpus={"node-1": 8},
            pending=[job("ddp").replicas(2, gpu=8).excluding("node-0")],
        )
    )
    (wait,) = decisions.waiting
    assert wait.reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert "node exclusions (not node-0)" in wait.reason.message
    assert wait.reason.details["excluded_nodes"] == ["node-0"]


def test_preemption_frees_no_excluded_node() -> None:
    snap = snapshot(
        nodes=cluster().nodes(2, gpus=8),
        running=[
            running("on-bad").priority(1).on("node-0", gpus=8),
            running("on-good").priority(1).on("node-1", gpus=8),
        ],
        pending=[job("urgent").priority(10).preempts().replicas(1, gpu=8).excluding("node-0")],
    )
    decisions = schedule(snap)
    assert [p.victim_id for p in decisions.preempted] == ["on-good"]
    assert decisions.preempted[0].nodes == ("node-1",)


def test_no_preemption_when_only_the_excluded_node_would_help() -> None:
    snap = snapshot(
        nodes=cluster().nodes(2, gpus=8),
        running=[running("on-bad").priority(1).on("node-0", gpus=8)],
        pending=[
            job("urgent").priority(10).preempts().replicas(2, gpu=8).excluding("node-0"),
        ],
    )
    assert schedule(snap).preempted == ()


def test_the_forecast_starts_it_only_when_an_allowed_node_frees() -> None:
    snap = snapshot(
        nodes=cluster().nodes(2, gpus=8),
        running=[
            running("short").on("node-0", gpus=8).max_runtime(100),
            running("long").on("node-1", gpus=8).max_runtime(500),
        ],
        pending=[job("kept").replicas(1, gpu=8).excluding("node-0")],
    )
    assert forecast(snap, Policy())["kept"] == pytest.approx(500)


def test_excluding_keeps_the_constraint_it_extends() -> None:
    base = NodeConstraint(selector=(("zone", "a"),))
    kept = excluding(base, frozenset({"n1"}))
    assert kept is not None
    assert kept.allows("n2", {"zone": "a"})
    assert not kept.allows("n1", {"zone": "a"})
    assert not kept.allows("n2", {"zone": "b"})
    assert excluding(base, frozenset()) is base
    assert excluding(None, frozenset()) is None
    assert str(kept) == "nodeSelector zone=a and node exclusions (not n1)"
