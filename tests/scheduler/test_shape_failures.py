"""A failed placement reused for every job of the same gang shape while the capacity and the
nodes kept for others stay (``Cycle.place_or_recall``, ``would_fit``, ``capacity_reason``, and
across cycles ``known_failure``): cycles decide exactly as cycles that place every job afresh."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from busy_nodes import busy_runs
from hypothesis import given, settings
from hypothesis import strategies as st
from node_changes import changed

from kiban.scheduler import ReasonCode, schedule
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.cycle import Cycle
from kiban.scheduler.decisions import Decisions
from kiban.scheduler.node_match import NodeConstraint
from kiban.scheduler.placement import GangAttempt
from kiban.scheduler.policy import Policy
from kiban.scheduler.reasons import PendingReason
from kiban.scheduler.snapshot import NodeView, PendingJob, Snapshot
from kiban.testing import cluster, job, queue, snapshot

LEVELS = ("block", "host")
H100 = NodeConstraint((("gpu.product", "H100"),))
NODES = [f"b0n-{i}" for i in range(3)] + [f"b1n-{i}" for i in range(3)]
POLICIES = [Policy(), Policy(preemption=False), Policy(max_reservations=2), Policy(backfill=False)]


def _plain_place(self: Cycle, job: PendingJob, flavor: str, off_reserved: bool) -> GangAttempt:
    return self.try_place(job, flavor, self.reservation_filter(job.id) if off_reserved else None)


def _plain_would_fit(self: Cycle, job: PendingJob, flavor: str) -> bool:
    with self.overlays[flavor].transaction():
        return self.try_place(job, flavor).fits


def _plain_reason(
    self: Cycle, job: PendingJob, flavor: str, placed: int | None, write: Any
) -> PendingReason:
    reason: PendingReason = write()
    return reason


@contextmanager
def no_memo() -> Iterator[None]:
    """Every placement, probe and reason made afresh, no failure kept across cycles."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Cycle, "place_or_recall", _plain_place)
        patch.setattr(Cycle, "would_fit", _plain_would_fit)
        patch.setattr(Cycle, "capacity_reason", _plain_reason)
        patch.setattr(Cycle, "known_failure", lambda self, job, flavor: None)
        yield


def _nodes() -> list[NodeView]:
    built = cluster()
    for block in ("b0", "b1"):
        labels = {"gpu.product": "H100"} if block == "b0" else {}
        built.nodes(3, gpus=8, prefix=f"{block}n", topology=(block,), labels=labels)
    return list(built.build())


tasks = st.tuples(
    st.integers(1, 4),  # replicas
    st.sampled_from([1, 2, 4, 8]),  # GPUs each
    st.sampled_from([None, None, 1, 2]),  # spread limit
    st.sampled_from([None, None, H100]),  # node selector
    st.sampled_from(["worker", "trainer"]),  # task name (quoted by reasons)
)


@st.composite
def crowded_snapshots(draw: st.DrawFn, nodes: list[NodeView] | None = None) -> Snapshot:
    """Busy nodes with jobs ending at shared times, and a window of many jobs drawn from one or
    two kinds of task (so that most share a gang shape, and some differ only in gang size or
    topology), differing in queue, priority, run time, preemption, kept and excluded nodes."""
    nodes = nodes if nodes is not None else _nodes()
    free = {n.name: len(n.free_gpu_ids) for n in nodes}
    runs = busy_runs(draw, free, draw(st.integers(0, 14)), queues=("qa", "qb", "qc"))
    pool = draw(st.lists(tasks, min_size=1, max_size=2))
    pending = []
    for i in range(draw(st.integers(2, 14))):
        # Jobs of the same tasks differ in gang size and topology now and then: other shapes.
        replicas, gpu, spread, selector, name = draw(st.sampled_from(pool))
        short = not draw(st.integers(0, 3))
        topology = draw(st.sampled_from([None, None, "preferred", "required"]))
        j = (
            job(f"p{i:02}")
            .queue(draw(st.sampled_from(["qa", "qa", "qb", "qc"])))
            .task(name, replicas, gpu=gpu, nodes=selector, max_per_node=spread)
            .priority(draw(st.sampled_from([100, 1000, 10000])))
            .submitted(float(draw(st.integers(0, 60))))
        )
        if short and replicas > 1:
            j.gang(replicas - 1)
        if topology is not None:
            j.topology("block", required=topology == "required")
        if draw(st.booleans()):
            j.max_runtime(float(draw(st.sampled_from([30, 80, 150, 500]))))
        if draw(st.booleans()):
            j.preempts()
        if not draw(st.integers(0, 5)):
            j.nominated(draw(st.sampled_from(NODES)))
        if not draw(st.integers(0, 7)):
            j.excluding(draw(st.sampled_from(NODES)))
        pending.append(j)
    return snapshot(
        nodes=nodes,
        queues=[queue("qa").best_effort(), queue("qb").best_effort(), queue("qc")],
        running=runs,
        pending=pending,
        now=50.0,
        topology_levels=LEVELS,
    )


def outcome(decisions: Decisions) -> tuple[object, ...]:
    """Everything a cycle decides: admissions and their placements, victims with their reasons
    and nodes, every wait with its reason, numbers and positions, and whether more follows."""
    waits = tuple(
        (w.job_id, w.reason.as_dict(), w.queue_position, w.cluster_position)
        for w in decisions.waiting
    )
    return (decisions.admitted, decisions.preempted, waits, decisions.more)


@settings(max_examples=150, deadline=None)
@given(crowded_snapshots(), st.sampled_from(POLICIES))
def test_a_cycle_reusing_failed_shapes_decides_as_one_placing_every_job(
    snap: Snapshot, policy: Policy
) -> None:
    with_memo = outcome(schedule(snap, policy))
    with no_memo():
        plain = outcome(schedule(snap, policy))
    assert with_memo == plain


change = st.tuples(
    st.sampled_from(["take", "give", "cordon", "relabel"]), st.integers(0, 20), st.integers(0, 8)
)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.lists(st.lists(change, max_size=2), min_size=2, max_size=5))
def test_cycles_with_a_kept_cache_decide_as_fresh_ones_and_as_ones_without_memos(
    data: st.DataObject, rounds: list[list[tuple[str, int, int]]]
) -> None:
    # The same jobs, or others of the same shapes, cycle after cycle; no change between two
    # cycles is common (the failures kept across cycles answer then).
    kept = CapacityCache()
    nodes = _nodes()
    for changes in rounds:
        for what, which, amount in changes:
            nodes = changed(nodes, what, which, amount)
        snap = data.draw(crowded_snapshots(nodes))
        policy = data.draw(st.sampled_from(POLICIES))
        with_memo = outcome(schedule(snap, policy, cache=kept))
        assert with_memo == outcome(schedule(snap, policy, cache=CapacityCache()))
        with no_memo():
            assert with_memo == outcome(schedule(snap, policy))


def test_a_window_of_one_shape_that_does_not_fit_is_placed_once() -> None:
    # 40 jobs of two tasks of 8 GPUs, best effort; no node has 8 free GPUs: one placement
    # answers all, and each job gets the reason a fresh placement would have written.
    busy = {"n-0": 6, "n-1": 7, "n-2": 1, "n-3": 4}  # 2, 1, 7 and 4 GPUs free
    nodes = list(cluster().nodes(4, gpus=8, prefix="n").build(busy))
    pending = [
        job(f"p{i:02}").queue("qa").task("a", gpu=8).task("b", gpu=8).submitted(float(i))
        for i in range(40)
    ]
    snap = snapshot(nodes=nodes, queues=[queue("qa").best_effort()], pending=pending)
    policy = Policy(preemption=False, backfill=False)
    tries = 0
    plain_try = Cycle.try_place

    def counting(self: Cycle, *args: Any, **kwargs: Any) -> GangAttempt:
        nonlocal tries
        tries += 1
        return plain_try(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Cycle, "try_place", counting)
        decisions = schedule(snap, policy)
    assert tries == 1
    assert len(decisions.waiting) == 40
    reasons = {id(w.reason): w.reason for w in decisions.waiting}  # written once, shared
    assert len(reasons) == 1
    (reason,) = reasons.values()
    assert reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert reason.details["free_gpus"] == 14
    assert reason.details["placeable_now"] == 0
    with no_memo():
        assert outcome(schedule(snap, policy)) == outcome(decisions)
