"""The simulator's cluster state keeps the last snapshot's parts (each queue's window, the
nodes, the running jobs, the one-member queues) until they change, and re-sorts only the
waiting jobs an estimate moved. Whatever happens between cycles (arrivals, cycles with
admissions and preemptions, ends, revised estimates), the next snapshot must be the one made
from scratch out of the waiting lists, and each queue must stay in the policy's order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiban.scheduler import schedule
from kiban.scheduler.attained_service import with_queue_strategies
from kiban.scheduler.policy import Policy
from kiban.scheduler.snapshot import FlavorView, NodeView, PendingJob, QueueStrategy, QueueView
from kiban.sim.state import ClusterState
from kiban.testing import job

WINDOW = 3
QUEUES = (
    QueueView("a", "a", strategy=QueueStrategy.SHORTEST_EXPECTED_SERVICE),
    QueueView("b", "b"),
)

arrive = st.tuples(
    st.just("arrive"),
    st.sampled_from(["a", "b"]),
    st.sampled_from([None, "u1", "u2"]),
    st.integers(1, 4),  # GPUs
    st.integers(0, 2),  # priority: higher ones preempt lower
    st.one_of(st.none(), st.sampled_from([10.0, 100.0, 1000.0])),
)
cycle = st.tuples(st.just("cycle"))
end = st.tuples(st.just("end"), st.integers(0, 50))
revise = st.tuples(
    st.just("revise"),
    st.sampled_from([("a",), ("b",), ("a", "b")]),
    st.integers(0, 2**16),  # which jobs learn what
)
steps = st.lists(st.one_of(arrive, arrive, cycle, cycle, end, revise), min_size=1, max_size=40)


def made_afresh(cluster: ClusterState) -> dict[str, object]:
    """What the snapshot should hold, made from the waiting lists and running jobs alone."""
    windows = {name: jobs[: cluster.window] for name, jobs in cluster.waiting.items() if jobs}
    pending = [job for jobs in windows.values() for job in jobs]
    members = {
        name
        for name, jobs in cluster.waiting.items()
        if len({(j.tenant, j.member) for j in jobs}) < 2 or all(j.member is None for j in jobs)
    }
    return {
        "pending": pending,
        "windows": windows,
        "in_window": {j.id: j for j in pending},
        "running": list(cluster.running.values()),
        "free": [sorted(free) for free in cluster.free],
        "count": sum(len(jobs) for jobs in cluster.waiting.values()),
        "one_member": {name for name in members if cluster.waiting[name]},
    }


def as_made(cluster: ClusterState) -> dict[str, object]:
    snapshot = cluster.snapshot(0.0, {})
    index = snapshot.pending_index
    assert index is not None
    return {
        "pending": list(snapshot.pending),
        "windows": {name: list(jobs) for name, jobs in index.by_queue.items()},
        "in_window": dict(cluster.in_window),
        "running": list(snapshot.running),
        "free": [list(node.free_gpu_ids) for node in snapshot.nodes],
        "count": cluster.pending,
        "one_member": {name for name in index.one_member if cluster.waiting.get(name)},
    }


def reviser(seed: int) -> Callable[[PendingJob], PendingJob]:
    """New estimates for some jobs (by their id and the seed), the others unchanged."""

    def revise(pending: PendingJob) -> PendingJob:
        pick = (int(pending.id[1:]) ^ seed) % 4
        if pick == 0:
            return pending
        if pick == 1:  # a new object, the same estimate: its place does not change
            return replace(pending, estimated_runtime=pending.estimated_runtime)
        return replace(pending, estimated_runtime=float(10 ** (pick + (seed % 3))))

    return revise


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_each_snapshot_is_the_one_made_afresh(plan: list[tuple[object, ...]]) -> None:
    policy = with_queue_strategies(Policy(), QUEUES)
    nodes = [NodeView(f"n{i}", 4, 64_000, 2**36, tuple(range(4)), 64_000, 2**36) for i in (0, 1)]
    cluster = ClusterState(
        nodes=nodes,
        queues=QUEUES,
        order_key=policy.order_key,
        flavors=(FlavorView("default"),),
        window=WINDOW,
    )
    made = 0
    for step in plan:
        kind = step[0]
        if kind == "arrive":
            _, queue, member, gpus, priority, estimate = step
            made += 1
            built = (
                job(f"j{made}")
                .queue(str(queue))
                .tenant(str(queue))
                .member(member if isinstance(member, str) else None)
                .priority(int(str(priority)))
                .preempts()
                .replicas(1, gpu=int(str(gpus)))
                .submitted(float(made))
            )
            if isinstance(estimate, float):
                built = built.estimated_runtime(estimate)
            cluster.add_waiting(built.build())
        elif kind == "cycle":
            decisions = schedule(cluster.snapshot(float(made), {}), policy)
            cluster.apply(decisions, float(made))
        elif kind == "end" and cluster.running:
            running = sorted(cluster.running)
            cluster.finish(running[int(str(step[1])) % len(running)])
        elif kind == "revise":
            tenants = step[1]
            assert isinstance(tenants, tuple)
            cluster.revise_waiting(set(tenants), reviser(int(str(step[2]))))
        for jobs in cluster.waiting.values():  # the policy's order, as a full sort gives it
            assert jobs == sorted(jobs, key=policy.order_key)
        assert as_made(cluster) == made_afresh(cluster)


def test_a_preemptors_nomination_shows_in_the_next_snapshot() -> None:
    """With a window of one job, the victim goes back behind its preemptor, out of the window:
    no arrival into the window marks the queue changed, only the preemptor's nomination."""
    policy = Policy()
    nodes = [NodeView("n0", 4, 64_000, 2**36, tuple(range(4)), 64_000, 2**36)]
    cluster = ClusterState(
        nodes=nodes,
        queues=(QueueView("a", "a"),),
        order_key=policy.order_key,
        flavors=(FlavorView("default"),),
        window=1,
    )
    cluster.add_waiting(job("low").queue("a").tenant("a").replicas(1, gpu=4).build())
    cluster.apply(schedule(cluster.snapshot(0.0, {}), policy), 0.0)
    high = job("high").queue("a").tenant("a").priority(1).preempts().replicas(1, gpu=4)
    cluster.add_waiting(high.submitted(1.0).build())
    decisions = schedule(cluster.snapshot(1.0, {}), policy)
    assert [p.victim_id for p in decisions.preempted] == ["low"]
    cluster.apply(decisions, 1.0)
    assert as_made(cluster) == made_afresh(cluster)
    assert cluster.snapshot(1.0, {}).pending[0].nominated_nodes == ("n0",)
