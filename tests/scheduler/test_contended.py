"""A contended cycle: the jobs behind a blocked StrictFIFO head are not visited one by one, yet
every one of them gets its wait, its reason naming the head, and the positions visiting each
job would give (the numbers are made when ``Decisions.waiting`` is read)."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from kiban.scheduler import ReasonCode, schedule
from kiban.scheduler.policy import OrderKey, Policy, priority_then_fifo
from kiban.scheduler.snapshot import PendingIndex, PendingJob, Snapshot
from kiban.scheduler.wait_replay import judged_reasons
from kiban.testing import cluster, job, queue, snapshot
from kiban.testing.builders import JobBuilder


def _backlog(behind: int) -> list[JobBuilder]:
    """Queue ``a`` (StrictFIFO): a head too large for the free GPUs, then ``behind`` 1-GPU jobs;
    queue ``b`` (BestEffortFIFO): 2-GPU jobs, none fits, submitted between ``a``'s."""
    jobs = [job("a-head").queue("a").replicas(1, gpu=2).submitted(0.0)]
    jobs += [job(f"a-{i:04d}").queue("a").submitted(1.0 + 2 * i) for i in range(behind)]
    jobs += [
        job(f"b-{i:04d}").queue("b").replicas(1, gpu=2).submitted(2.0 + 2 * i) for i in range(3)
    ]
    return jobs


def _contended(behind: int) -> Snapshot:
    return snapshot(
        nodes=cluster().nodes(2, gpus=2),
        queues=[queue("a").strict(), queue("b").best_effort()],
        pending=_backlog(behind),
        running_gpus={"node-0": 1, "node-1": 1},
    )


def test_every_job_behind_a_blocked_head_names_it_with_its_positions() -> None:
    decisions = schedule(_contended(1_000))
    assert decisions.admitted == ()
    waits = {w.job_id: w for w in decisions.waiting}
    assert len(waits) == 1 + 1_000 + 3
    assert waits["a-head"].reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    for i in range(1_000):
        wait = waits[f"a-{i:04d}"]
        assert wait.reason.code is ReasonCode.BLOCKED_BY_QUEUE_HEAD
        assert wait.reason.details == {"queue": "a", "head": "a-head"}
        assert wait.queue_position == i + 2
    # Cluster positions: the order of visits, queue heads by submit time (no standings): a-head,
    # a-0000 (t=1), b-0000 (t=2), a-0001 (t=3), b-0001 (t=4), a-0002, b-0002, a-0003, ...
    order = [w.job_id for w in sorted(decisions.waiting, key=lambda w: w.cluster_position)]
    assert order[:8] == [
        "a-head",
        "a-0000",
        "b-0000",
        "a-0001",
        "b-0001",
        "a-0002",
        "b-0002",
        "a-0003",
    ]
    assert [w.cluster_position for w in decisions.waiting] == list(range(1, 1_005))
    assert {w.job_id: w.queue_position for w in decisions.waiting if w.job_id.startswith("b")} == {
        "b-0000": 1,
        "b-0001": 2,
        "b-0002": 3,
    }


def test_the_cycle_judges_only_the_head_of_a_blocked_queue() -> None:
    decisions = schedule(_contended(1_000))
    judged = dict(judged_reasons(decisions.waiting))
    assert set(judged) == {"a-head", "b-0000", "b-0001", "b-0002"}
    assert judged["a-head"].code is ReasonCode.INSUFFICIENT_CAPACITY


def test_a_spent_budget_with_jobs_behind_a_blocked_head_still_asks_for_the_next_cycle() -> None:
    # a-head blocks its queue, b-0 spends the budget of one placement; a-1 and a-2 come after
    # in the fair order: as if each were visited, they are unconsidered and the cycle says more.
    snap = snapshot(
        nodes=cluster().nodes(1, gpus=2),
        queues=[queue("a").strict(), queue("b").best_effort()],
        pending=[
            job("a-head").queue("a").replicas(1, gpu=2).submitted(0.0),
            job("b-0").queue("b").submitted(1.0),
            job("a-1").queue("a").submitted(2.0),
            job("a-2").queue("a").submitted(3.0),
        ],
        running_gpus={"node-0": 1},
    )
    decisions = schedule(snap, Policy(max_placements_per_cycle=1))
    assert [a.job_id for a in decisions.admitted] == ["b-0"]
    assert decisions.more
    codes = {w.job_id: w.reason.code for w in decisions.waiting}
    assert codes == {
        "a-head": ReasonCode.INSUFFICIENT_CAPACITY,
        "a-1": ReasonCode.QUEUE_BACKLOG,
        "a-2": ReasonCode.QUEUE_BACKLOG,
    }


def test_a_budget_spent_by_the_last_job_asks_for_no_next_cycle() -> None:
    snap = snapshot(
        nodes=cluster().nodes(1, gpus=2),
        queues=[queue("a").strict(), queue("b").best_effort()],
        pending=[
            job("a-head").queue("a").replicas(1, gpu=2).submitted(0.0),
            job("a-1").queue("a").submitted(1.0),
            job("b-0").queue("b").submitted(2.0),
        ],
        running_gpus={"node-0": 1},
    )
    decisions = schedule(snap, Policy(max_placements_per_cycle=1))
    assert [a.job_id for a in decisions.admitted] == ["b-0"]
    assert not decisions.more
    codes = {w.job_id: w.reason.code for w in decisions.waiting}
    assert codes == {
        "a-head": ReasonCode.INSUFFICIENT_CAPACITY,
        "a-1": ReasonCode.BLOCKED_BY_QUEUE_HEAD,
    }


def _indexed(snap: Snapshot, order_key: OrderKey) -> Snapshot:
    """The snapshot with a pending index sorted by ``order_key``, as the simulator hands it."""
    by_queue: dict[str, list[PendingJob]] = {}
    for pending in sorted(snap.pending, key=order_key):
        by_queue.setdefault(pending.queue, []).append(pending)
    nominated = [p for p in snap.pending if p.nominated_nodes]
    return replace(snap, pending_index=PendingIndex(by_queue, nominated, order_key))


def test_a_pending_index_in_the_policy_order_gives_the_same_decisions() -> None:
    snap = _contended(50)
    plain = schedule(snap)
    indexed = schedule(_indexed(snap, priority_then_fifo))
    assert indexed.admitted == plain.admitted
    assert list(indexed.waiting) == list(plain.waiting)


def test_a_pending_index_in_another_order_is_not_used() -> None:
    # Sorted newest first, the index would put b-0002 at the head of queue b: ignored, since
    # the policy orders by priority then submit time.
    snap = _contended(5)
    newest_first = cast(OrderKey, lambda p: (-p.submitted_at, p.id))
    decisions = schedule(_indexed(snap, newest_first))
    order = [w.job_id for w in decisions.waiting]
    assert order[:4] == ["a-head", "a-0000", "b-0000", "a-0001"]
