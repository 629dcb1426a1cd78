"""A waiting job's reason reused for the next jobs of its queue and gang shape while the cycle's
state stays (``kiban.scheduler.verdicts``): cycles decide exactly as cycles that judge every
job, on windows of many jobs of a few shapes in quota-bound, cohort-sharing queues."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from busy_nodes import busy_runs
from hypothesis import given, settings
from hypothesis import strategies as st
from node_changes import CHANGES, changed

from kiban.scheduler import ReasonCode, schedule
from kiban.scheduler import core as core_module
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.cycle import Cycle
from kiban.scheduler.decisions import Decisions
from kiban.scheduler.node_match import NodeConstraint
from kiban.scheduler.policy import Policy
from kiban.scheduler.snapshot import NodeView, PendingJob, QueueView, Snapshot
from kiban.scheduler.verdicts import Verdicts
from kiban.testing import cluster, job, queue, running, snapshot

LEVELS = ("block", "host")
H100 = NodeConstraint((("gpu.product", "H100"),))
NODES = [f"a-{i}" for i in range(3)] + [f"h-{i}" for i in range(3)]
POLICIES = [
    Policy(),
    Policy(max_preemption_searches=0),
    Policy(max_preemption_searches=1, max_reservations=1),
    Policy(preemption=False, max_reservations=2),
    Policy(backfill=False, max_preemption_searches=2),
    Policy(max_placements_per_cycle=3, max_preemption_searches=0),
]


@contextmanager
def judging_every_job() -> Iterator[None]:
    """Every job judged afresh: no verdict kept for the next job of its shape."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Verdicts, "key", lambda self, job, queue: None)
        yield


def _nodes() -> list[NodeView]:
    built = cluster()
    built.nodes(3, gpus=8, prefix="a", flavor="a100", topology=("b0",), labels={})
    built.nodes(3, gpus=8, prefix="h", flavor="h100", topology=("b1",))
    nodes = list(built.build())
    # one A100 node carries the H100 label too, so that a selector splits the flavor
    return [*nodes[:2], changed(nodes, "relabel", 2, 0)[2], *nodes[3:]]


def _queues(draw: st.DrawFn) -> list[Any]:
    """Best-effort queues sharing a cohort with small quotas (most jobs are refused by quota,
    by the cohort, or by capacity), a StrictFIFO one without quota, a scavenger."""
    qa = queue("qa").best_effort().tenant("t1").cohort("c")
    qb = queue("qb").best_effort().tenant("t2").cohort("c")
    for q in (qa, qb):
        for flavor in ("a100", "h100"):
            q.nominal(flavor, draw(st.sampled_from([0, 4, 8, 16])))
    if draw(st.booleans()):
        qb.borrowing_limit("a100", draw(st.sampled_from([0, 4])))
    if draw(st.booleans()):
        qa.lending_limit("h100", draw(st.sampled_from([0, 4])))
    qc = queue("qc").best_effort().tenant("t1")
    if draw(st.booleans()):
        qc.scavenger()
    return [qa, qb, qc, queue("qd").best_effort().tenant("t3"), queue("qs").tenant("t3")]


tasks = st.tuples(
    st.integers(1, 3),  # replicas
    st.sampled_from([1, 2, 4, 8]),  # GPUs each
    st.sampled_from([None, None, 1]),  # spread limit
    st.sampled_from([None, None, None, H100]),  # node selector
)


@st.composite
def windows(draw: st.DrawFn, nodes: list[NodeView] | None = None) -> Snapshot:
    """Busy nodes (some jobs being stopped for a waiting one) and a window of many jobs of one
    to three shapes, differing in queue, priority, run time (some end before the reservations,
    some after), preemption, kept and excluded nodes."""
    nodes = nodes if nodes is not None else _nodes()
    free = {n.name: len(n.free_gpu_ids) for n in nodes}
    runs = busy_runs(draw, free, draw(st.integers(0, 12)), queues=("qa", "qb", "qc", "qd", "qs"))
    for r in runs:
        if not draw(st.integers(0, 6)):
            r.preempted_by(f"p{draw(st.integers(0, 5)):02}")
    pool = draw(st.lists(tasks, min_size=1, max_size=3))
    pending = []
    for i in range(draw(st.integers(2, 24))):
        replicas, gpu, spread, selector = draw(st.sampled_from(pool))
        j = (
            job(f"p{i:02}")
            .queue(draw(st.sampled_from(["qa", "qa", "qb", "qc", "qd", "qd", "qs"])))
            .task("worker", replicas, gpu=gpu, nodes=selector, max_per_node=spread)
            .priority(draw(st.sampled_from([100, 1000, 10000])))
            .submitted(float(draw(st.integers(0, 60))))
        )
        if not draw(st.integers(0, 4)):
            j.topology("block", required=draw(st.booleans()))
        runtime = draw(st.sampled_from([None, "max", "estimated"]))
        if runtime is not None:
            seconds = float(draw(st.sampled_from([30, 80, 150, 500])))
            j.max_runtime(seconds) if runtime == "max" else j.estimated_runtime(seconds)
        if draw(st.booleans()):
            j.preempts()
        if not draw(st.integers(0, 6)):
            j.nominated(draw(st.sampled_from(NODES)))
        if not draw(st.integers(0, 8)):
            j.excluding(draw(st.sampled_from(NODES)))
        pending.append(j)
    return snapshot(
        nodes=nodes,
        queues=_queues(draw),
        running=runs,
        pending=pending,
        now=50.0,
        topology_levels=LEVELS,
        standings={"t1": float(draw(st.integers(0, 2))), "t2": 1.0},
    )


def outcome(decisions: Decisions) -> tuple[object, ...]:
    """Everything a cycle decides: admissions and their placements, victims with their reasons
    and nodes, every wait with its reason, numbers and positions, and whether more follows."""
    waits = tuple(
        (w.job_id, w.reason.as_dict(), w.queue_position, w.cluster_position, w.reserved_at)
        for w in decisions.waiting
    )
    return (decisions.admitted, decisions.preempted, waits, decisions.more)


@settings(max_examples=200, deadline=None)
@given(windows(), st.sampled_from(POLICIES))
def test_a_cycle_reusing_verdicts_decides_as_one_judging_every_job(
    snap: Snapshot, policy: Policy
) -> None:
    reusing = outcome(schedule(snap, policy))
    with judging_every_job():
        assert reusing == outcome(schedule(snap, policy))


change = st.tuples(st.sampled_from(CHANGES), st.integers(0, 20), st.integers(0, 8))


@settings(max_examples=60, deadline=None)
@given(st.data(), st.lists(st.lists(change, max_size=2), min_size=2, max_size=4))
def test_cycles_with_a_kept_cache_decide_as_ones_judging_every_job(
    data: st.DataObject, rounds: list[list[tuple[str, int, int]]]
) -> None:
    # The failures kept across cycles (read by judging) answer when nothing changed between
    # two cycles: a verdict must not outlive them, nor come from before them.
    kept = CapacityCache()
    plain = CapacityCache()
    nodes = _nodes()
    for changes in rounds:
        for what, which, amount in changes:
            nodes = changed(nodes, what, which, amount)
        snap = data.draw(windows(nodes))
        policy = data.draw(st.sampled_from(POLICIES))
        reusing = outcome(schedule(snap, policy, cache=kept))
        with judging_every_job():
            assert reusing == outcome(schedule(snap, policy, cache=plain))


def test_a_window_refused_by_quota_is_judged_once_per_shape() -> None:
    # 60 jobs of two shapes in a queue whose quota is spent: two judgings answer all, and each
    # job gets the refusal a judging would have written, with its own numbers.
    nodes = cluster().nodes(4, gpus=8, prefix="n")
    pending = [
        job(f"p{i:02}").queue("qa").task("worker", 1, gpu=2 if i % 2 else 4).submitted(float(i))
        for i in range(60)
    ]
    queues = [queue("qa").best_effort().quota(8).using(8)]
    snap = snapshot(nodes=nodes, queues=queues, pending=pending)
    policy = Policy(preemption=False)
    judged: list[str] = []
    plain_judge = core_module._judge

    def counting(cycle: Cycle, job: PendingJob, queue: QueueView, *rest: Any) -> Any:
        judged.append(job.id)
        return plain_judge(cycle, job, queue, *rest)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core_module, "_judge", counting)
        decisions = schedule(snap, policy)
    assert judged == ["p00", "p01"]
    assert len(decisions.waiting) == 60
    by_gpus = {w.reason.details["needed_gpus"] for w in decisions.waiting}
    assert by_gpus == {2, 4}
    assert all(w.reason.code is ReasonCode.QUEUE_QUOTA_EXHAUSTED for w in decisions.waiting)
    with judging_every_job():
        assert outcome(schedule(snap, policy)) == outcome(decisions)


def test_jobs_of_one_shape_that_end_before_a_reservation_or_not_are_judged_apart() -> None:
    # The only free GPUs are kept for p00 from t=100. p01 runs too long to use them meanwhile
    # (blocked by the reservation); p02, of the same queue and shape, ends in time and starts.
    nodes = cluster().nodes(2, gpus=8, prefix="n")
    runs = [
        running("r0").queue("qa").on("n-0", gpus=4).max_runtime(100.0),
        running("r1").queue("qa").on("n-1", gpus=8).max_runtime(1000.0),
    ]
    pending = [
        job("p00").queue("qa").task("big", 1, gpu=8).submitted(0.0),
        job("p01").queue("qa").task("worker", 1, gpu=2).submitted(1.0).max_runtime(500.0),
        job("p02").queue("qa").task("worker", 1, gpu=2).submitted(2.0).estimated_runtime(50.0),
    ]
    snap = snapshot(nodes=nodes, queues=[queue("qa").best_effort()], running=runs, pending=pending)
    policy = Policy(preemption=False, max_reservations=1)
    decisions = schedule(snap, policy)
    assert [a.job_id for a in decisions.admitted] == ["p02"]
    reasons = {w.job_id: w.reason.code for w in decisions.waiting}
    assert reasons == {
        "p00": ReasonCode.WAITING_FOR_RESERVATION,
        "p01": ReasonCode.BLOCKED_BY_RESERVATION,
    }
    with judging_every_job():
        assert outcome(schedule(snap, policy)) == outcome(decisions)


def test_a_job_that_may_search_for_victims_is_judged_itself() -> None:
    # Three jobs of one queue and shape; only p02 may preempt the running job (its priority
    # class preempts lower ones), so only p02 finds a victim: a verdict kept from p01 (judged
    # once p00's failed shape was kept) must not answer for it.
    nodes = cluster().nodes(1, gpus=8, prefix="n")
    runs = [running("r0").queue("qa").priority(100).on("n-0", gpus=8)]
    pending = [
        job("p00").queue("qa").task("worker", 1, gpu=4).priority(1000).submitted(0.0),
        job("p01").queue("qa").task("worker", 1, gpu=4).priority(1000).submitted(1.0),
        job("p02").queue("qa").task("worker", 1, gpu=4).priority(1000).preempts().submitted(2.0),
    ]
    snap = snapshot(nodes=nodes, queues=[queue("qa").best_effort()], running=runs, pending=pending)
    decisions = schedule(snap, Policy())
    assert [(p.victim_id, p.preemptor_id) for p in decisions.preempted] == [("r0", "p02")]
    with judging_every_job():
        assert outcome(schedule(snap, Policy())) == outcome(decisions)


def _counting_judge(judged: list[str]) -> Any:
    plain_judge = core_module._judge

    def counting(cycle: Cycle, job: PendingJob, queue: QueueView, *rest: Any) -> Any:
        judged.append(job.id)
        return plain_judge(cycle, job, queue, *rest)

    return counting


def test_a_strict_fifo_queue_shares_verdicts_only_once_its_head_passed_as_unschedulable() -> None:
    # qs (StrictFIFO, quota 4): s00-s04 ask 8 GPUs, more than it can ever hold, so each holds up
    # nobody: s00 is judged without a key (nothing of its queue is kept yet), s01 is judged and
    # kept, s02-s04 take s01's verdict; s05 fits, s06 waits for capacity and blocks s07. qf's
    # blocked head is judged alone, its queue never looked up.
    nodes = cluster().nodes(1, gpus=8, prefix="n")
    runs = [running("r0").queue("qf").on("n-0", gpus=6)]
    strict = [job(f"s{i:02}").queue("qs").task("w", 1, gpu=8).submitted(float(i)) for i in range(5)]
    pending = [
        *strict,
        job("s05").queue("qs").task("w", 1, gpu=1).submitted(5.0),
        job("s06").queue("qs").task("w", 1, gpu=3).submitted(6.0),
        job("s07").queue("qs").task("w", 1, gpu=3).submitted(7.0),
        job("f00").queue("qf").task("w", 1, gpu=4).submitted(0.5),
        job("f01").queue("qf").task("w", 1, gpu=4).submitted(1.5),
    ]
    queues = [queue("qs").strict().tenant("t1").quota(4), queue("qf").strict().tenant("t2")]
    snap = snapshot(nodes=nodes, queues=queues, running=runs, pending=pending)
    judged: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core_module, "_judge", _counting_judge(judged))
        decisions = schedule(snap, Policy(preemption=False))
    assert sorted(judged) == ["f00", "s00", "s01", "s05", "s06"]
    assert [a.job_id for a in decisions.admitted] == ["s05"]
    codes = {w.job_id: w.reason.code for w in decisions.waiting}
    assert [codes[f"s{i:02}"] for i in range(5)] == [ReasonCode.UNSCHEDULABLE] * 5
    assert codes["s06"] is ReasonCode.INSUFFICIENT_CAPACITY
    assert codes["s07"] is codes["f01"] is ReasonCode.BLOCKED_BY_QUEUE_HEAD
    with judging_every_job():
        assert outcome(schedule(snap, Policy(preemption=False))) == outcome(decisions)


def test_blocked_strict_fifo_heads_read_no_judging_state() -> None:
    # Three StrictFIFO queues whose heads wait for capacity: no verdict of theirs could be looked
    # up, so the cycle's state is never read for one.
    nodes = cluster().nodes(2, gpus=8, prefix="n")
    runs = [
        running("r0").queue("q0").on("n-0", gpus=8),
        running("r1").queue("q1").on("n-1", gpus=8),
    ]
    pending = [
        job(f"p{q}{i}").queue(f"q{q}").task("w", 1, gpu=4).submitted(float(i))
        for q in range(3)
        for i in range(3)
    ]
    queues = [queue(f"q{q}").strict().tenant(f"t{q}") for q in range(3)]
    snap = snapshot(nodes=nodes, queues=queues, running=runs, pending=pending)
    reads: list[int] = []
    plain_state = Cycle.judging_state

    def counting(self: Cycle) -> tuple[object, ...]:
        reads.append(1)
        return plain_state(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Cycle, "judging_state", counting)
        decisions = schedule(snap, Policy(preemption=False, backfill=False))
    assert reads == []
    assert {w.reason.code for w in decisions.waiting} == {
        ReasonCode.INSUFFICIENT_CAPACITY,
        ReasonCode.BLOCKED_BY_QUEUE_HEAD,
    }
    with judging_every_job():
        assert outcome(schedule(snap, Policy(preemption=False, backfill=False))) == outcome(
            decisions
        )
