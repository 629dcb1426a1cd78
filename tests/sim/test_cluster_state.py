"""The simulator's cluster state keeps its running jobs by queue for the core, as they change."""

from __future__ import annotations

from dataclasses import replace

from kiban.scheduler import schedule
from kiban.scheduler.attained_service import with_queue_strategies
from kiban.scheduler.policy import Policy, priority_then_fifo
from kiban.scheduler.snapshot import (
    FlavorView,
    NodeView,
    PendingJob,
    QueueStrategy,
    QueueView,
    RunningJob,
    RunningReplica,
)
from kiban.sim.state import ClusterState
from kiban.testing import job


def state() -> ClusterState:
    nodes = [NodeView(f"n{i}", 8, 64_000, 2**36, tuple(range(8)), 64_000, 2**36) for i in range(2)]
    queues = [QueueView("a", "a"), QueueView("b", "b")]
    return ClusterState(
        nodes=nodes, queues=queues, order_key=priority_then_fifo, flavors=(FlavorView("default"),)
    )


def running(job_id: str, queue: str, node: str, gpu: int, **extra: object) -> RunningJob:
    return RunningJob(
        id=job_id,
        queue=queue,
        tenant=queue,
        priority=0,
        submitted_at=0.0,
        started_at=0.0,
        replicas=(RunningReplica(node, (gpu,), 0, 0),),
        flavor_gpus={"default": 1},
        **extra,
    )


def by_queue(cluster: ClusterState) -> dict[str, list[str]]:
    index = cluster.snapshot(0.0, {}).running_index
    assert index is not None
    return {name: [job.id for job in jobs] for name, jobs in index.by_queue.items()}


def test_started_replaced_and_finished_jobs_are_grouped_as_they_are_now() -> None:
    cluster = state()
    cluster.add_running(running("a1", "a", "n0", 0))
    cluster.add_running(running("a2", "a", "n0", 1))
    cluster.add_running(running("b1", "b", "n1", 0))
    assert by_queue(cluster) == {"a": ["a1", "a2"], "b": ["b1"]}

    stopping = running("a2", "a", "n0", 1, preempted_by="b9")
    cluster.replace_running(stopping)
    index = cluster.snapshot(0.0, {}).running_index
    assert index is not None
    assert list(index.stopping) == [stopping]
    assert index.by_queue["a"][1] is stopping  # the new view, not the old one

    cluster.finish("a2")
    cluster.finish("b1")
    index = cluster.snapshot(0.0, {}).running_index
    assert index is not None
    assert {name: [j.id for j in jobs] for name, jobs in index.by_queue.items()} == {"a": ["a1"]}
    assert list(index.stopping) == []


def one_member(cluster: ClusterState) -> frozenset[str]:
    index = cluster.snapshot(0.0, {}).pending_index
    assert index is not None
    return frozenset(index.one_member)


def test_the_queues_of_one_members_jobs_are_named_as_jobs_come_and_start() -> None:
    cluster = state()
    assert one_member(cluster) == frozenset()  # no waiting job yet: nothing to say
    for i in (1, 2):  # u1's jobs never fit a node
        u1 = job(f"u1-{i}").queue("a").tenant("a").member("u1").replicas(1, gpu=16)
        cluster.add_waiting(u1.submitted(0.0).build())
    cluster.add_waiting(job("b1").queue("b").tenant("b").submitted(0.0).build())  # no member
    assert one_member(cluster) == {"a", "b"}

    cluster.add_waiting(job("u2-1").queue("a").tenant("a").member("u2").submitted(1.0).build())
    assert one_member(cluster) == {"b"}  # a mixes u1 and u2: the core looks at its jobs

    decisions = schedule(cluster.snapshot(0.0, {}), Policy())
    assert {a.job_id for a in decisions.admitted} == {"u2-1", "b1"}
    cluster.apply(decisions, 0.0)
    assert one_member(cluster) == {"a", "b"}  # u2's job started: u1's are left; b is empty


def test_revised_estimates_reorder_the_waiting_jobs_as_the_live_loop_would() -> None:
    """In a ShortestExpectedService queue (the fewest expected GPU-seconds first), queue a
    waits as x, y, z (first come, nothing known yet). Estimates learned for a: x 5,000 s,
    y 100 s, z none: the next snapshot shows y, x, z, as the live loop sorts what it knows
    each cycle; queue b, not revised, keeps its order."""
    queues = [
        QueueView("a", "a", strategy=QueueStrategy.SHORTEST_EXPECTED_SERVICE),
        QueueView("b", "b"),
    ]
    policy = with_queue_strategies(Policy(), queues)
    nodes = [NodeView("n0", 1, 64_000, 2**36, (0,), 64_000, 2**36)]
    cluster = ClusterState(
        nodes=nodes, queues=queues, order_key=policy.order_key, flavors=(FlavorView("default"),)
    )
    for i, (name, queue) in enumerate([("x", "a"), ("y", "a"), ("z", "a"), ("w", "b")]):
        cluster.add_waiting(job(name).queue(queue).tenant(queue).submitted(float(i)).build())
    learned = {"x": 5000.0, "y": 100.0}

    def revise(pending: PendingJob) -> PendingJob:
        known = learned.get(pending.id)
        return pending if known is None else replace(pending, estimated_runtime=known)

    cluster.revise_waiting({"a"}, revise)
    pending = cluster.snapshot(10.0, {}).pending
    assert [(j.id, j.estimated_runtime) for j in pending] == [
        ("y", 100.0),
        ("x", 5000.0),
        ("z", None),
        ("w", None),
    ]
