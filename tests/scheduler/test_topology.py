"""Topology-aware gangs: the smallest domain that holds the gang, required or preferred."""

from __future__ import annotations

from kiban.scheduler import Decisions, ReasonCode, schedule
from kiban.testing import ClusterBuilder, cluster, job, running, snapshot

LEVELS = ("block", "host")


def blocks() -> ClusterBuilder:
    """Block b0 with 4 nodes, block b1 with 2 nodes, 8 GPUs each."""
    return (
        cluster()
        .nodes(4, gpus=8, prefix="b0n", topology=("b0",))
        .nodes(2, gpus=8, prefix="b1n", topology=("b1",))
    )


def blocks_of(decisions: Decisions, job_id: str) -> set[str]:
    (admit,) = [a for a in decisions.admitted if a.job_id == job_id]
    return {p.node.split("n")[0] for p in admit.placements}


def test_gang_goes_into_the_smallest_block_that_holds_it() -> None:
    decisions = schedule(
        snapshot(
            nodes=blocks(),
            pending=[job("pair").replicas(2, gpu=8).topology("block")],
            topology_levels=LEVELS,
        )
    )
    assert blocks_of(decisions, "pair") == {"b1"}


def test_required_gang_never_spans_blocks() -> None:
    decisions = schedule(
        snapshot(
            nodes=blocks(),
            running=[running("r").on("b0n-0", gpus=8).on("b0n-1", gpus=8)],
            pending=[job("trio").replicas(3, gpu=8).topology("block")],
            topology_levels=LEVELS,
        )
    )
    # 4 nodes free (2 in each block): enough GPUs, but no block has three free nodes.
    assert decisions.admitted == ()
    assert decisions.waiting[0].reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert "in one block" in decisions.waiting[0].reason.message


def test_required_gang_larger_than_any_block_is_unsatisfiable() -> None:
    decisions = schedule(
        snapshot(
            nodes=blocks(),
            pending=[job("huge").replicas(5, gpu=8).topology("block")],
            topology_levels=LEVELS,
        )
    )
    reason = decisions.waiting[0].reason
    assert reason.code is ReasonCode.UNSCHEDULABLE  # no block is that large, even idle
    assert reason.details["limit"] == "topology"
    assert reason.details["most_replicas_in_one"] == 4


def test_preferred_gang_spans_blocks_when_no_block_holds_it() -> None:
    decisions = schedule(
        snapshot(
            nodes=blocks(),
            pending=[job("huge").replicas(5, gpu=8).topology("block", required=False)],
            topology_levels=LEVELS,
        )
    )
    assert blocks_of(decisions, "huge") == {"b0", "b1"}


def test_unknown_level_required_is_unsatisfiable() -> None:
    decisions = schedule(
        snapshot(
            nodes=blocks(),
            pending=[job("j").replicas(1, gpu=8).topology("rack")],
            topology_levels=LEVELS,
        )
    )
    assert decisions.waiting[0].reason.code is ReasonCode.UNSCHEDULABLE
    assert decisions.waiting[0].reason.details["limit"] == "topology"
