"""A blocked head's capacity failure kept across cycles (``Cycle.known_failure``): the cycles of
one caller decide exactly as cycles that build everything afresh, whatever changed between."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from node_changes import CHANGES, changed

from kiban.scheduler import ReasonCode, schedule
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.decisions import Decisions
from kiban.scheduler.node_match import NodeConstraint
from kiban.scheduler.snapshot import NodeView, PendingJob, Snapshot
from kiban.testing import cluster, job, queue, snapshot

LEVELS = ("island", "block")
H100 = NodeConstraint((("gpu.product", "H100"),))


def _nodes() -> list[NodeView]:
    return list(
        cluster()
        .nodes(2, gpus=8, prefix="a", topology=("i0", "b0"), labels={"gpu.product": "H100"})
        .nodes(2, gpus=8, prefix="b", topology=("i0", "b1"))
        .build({"a-0": 6, "a-1": 7, "b-0": 5, "b-1": 8})
    )


def _jobs(size: int) -> list[PendingJob]:
    """A StrictFIFO queue's head (its size varies with ``size``), and jobs of other queues with
    node selectors, topology and spread limits, most of which wait for capacity."""
    return [
        job("head").queue("strict").replicas(2, gpu=size).submitted(0.0).build(),
        job("behind").queue("strict").replicas(1, gpu=1).submitted(1.0).build(),
        job("h100").queue("sel").replicas(1, gpu=3, nodes=H100).submitted(2.0).build(),
        job("block").queue("topo").replicas(2, gpu=3).topology("block").submitted(3.0).build(),
        job("spread").queue("spr").replicas(3, gpu=2, max_per_node=1).submitted(4.0).build(),
    ]


def _snapshot(nodes: list[NodeView], jobs: list[PendingJob]) -> Snapshot:
    return snapshot(
        nodes=nodes,
        queues=[queue("strict").strict(), queue("sel"), queue("topo"), queue("spr")],
        pending=jobs,
        topology_levels=LEVELS,
    )


def _outcome(decisions: Decisions) -> dict[str, Any]:
    """Everything a caller reads of the decisions: admissions with their placements, each
    wait's reason with its numbers and positions, preemptions."""
    return {
        "admitted": [(a.job_id, a.flavor, a.placements) for a in decisions.admitted],
        "waiting": sorted(
            (w.job_id, w.reason.as_dict(), w.queue_position, w.cluster_position)
            for w in decisions.waiting
        ),
        "preempted": [(p.victim_id, p.preemptor_id) for p in decisions.preempted],
        "more": decisions.more,
    }


change = st.tuples(
    st.sampled_from(CHANGES),
    st.integers(0, 20),
    st.integers(0, 8),
)
rounds = st.lists(
    st.tuples(st.lists(change, max_size=3), st.integers(2, 5)), min_size=2, max_size=8
)


@settings(max_examples=120, deadline=None)
@given(rounds)
def test_cycles_with_a_kept_cache_decide_as_fresh_ones(steps: list[Any]) -> None:
    # Rounds with no change at all are common (the memo answers then); between the others any
    # node may change, and the head's size too (the same id, another shape).
    kept = CapacityCache()
    nodes = _nodes()
    for changes, size in steps:
        for what, which, amount in changes:
            nodes = changed(nodes, what, which, amount)
        snap = _snapshot(nodes, _jobs(size))
        with_memo = _outcome(schedule(snap, cache=kept))
        assert with_memo == _outcome(schedule(snap, cache=CapacityCache()))
        assert with_memo == _outcome(schedule(snap))


def test_a_blocked_head_is_answered_from_the_memo_until_a_node_frees_gpus() -> None:
    cache = CapacityCache()
    nodes = _nodes()
    jobs = _jobs(4)  # 2 x 4 GPUs: no node has 4 free (2, 1, 3 and 0)
    first = schedule(_snapshot(nodes, jobs), cache=cache)
    again = schedule(_snapshot(nodes, jobs), cache=cache)
    head = {w.job_id: w.reason for w in first.waiting}["head"]
    assert head.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert head.details["free_gpus"] == 6
    # Nothing changed: the second cycle did not place the head again, it read the first's answer.
    assert {w.job_id: w.reason for w in again.waiting}["head"] is head
    # b-1 frees its 8 GPUs: the head fits now, both replicas on it.
    freed = [
        dataclasses.replace(n, free_gpu_ids=tuple(range(8))) if n.name == "b-1" else n
        for n in nodes
    ]
    started = schedule(_snapshot(freed, jobs), cache=cache)
    assert [a.job_id for a in started.admitted][:1] == ["head"]


def test_a_relabelled_node_is_seen_by_a_job_that_waited_for_it() -> None:
    cache = CapacityCache()
    nodes = _nodes()
    jobs = [job("h100").queue("strict").replicas(1, gpu=3, nodes=H100).build()]
    snap = snapshot(nodes=nodes, queues=[queue("strict").strict()], pending=jobs)
    assert schedule(snap, cache=cache).admitted == ()
    assert schedule(snap, cache=cache).admitted == ()
    # b-0 (3 free GPUs) becomes an H100 node: only its labels changed, not its capacity.
    relabelled = [
        dataclasses.replace(n, labels={"gpu.product": "H100"}) if n.name == "b-0" else n
        for n in nodes
    ]
    snap = snapshot(nodes=relabelled, queues=[queue("strict").strict()], pending=jobs)
    admitted = schedule(snap, cache=cache).admitted
    assert [(a.job_id, a.placements[0].node) for a in admitted] == [("h100", "b-0")]
