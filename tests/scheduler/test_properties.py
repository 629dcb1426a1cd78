"""Properties of one scheduling cycle over random clusters and workloads."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from kiban.scheduler import Decisions, ReasonCode, Snapshot, schedule
from kiban.scheduler.snapshot import PendingJob, QueueStrategy
from kiban.testing import cluster, job, queue, snapshot

GIB = 2**30
FAST = settings(max_examples=100, deadline=None)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    """A few nodes (some busy, some cordoned), a few queues (some with quotas), pending jobs."""
    nodes = cluster()
    running_gpus: dict[str, list[int]] = {}
    running_cpu: dict[str, int] = {}
    running_memory: dict[str, int] = {}
    for i in range(draw(st.integers(1, 6))):
        name = f"n{i}"
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        cpu = draw(st.sampled_from([4000, 16_000, 64_000]))
        memory = draw(st.sampled_from([8, 64, 512])) * GIB
        nodes.node(name, gpus=gpus, cpu_millis=cpu, memory=memory)
        if draw(st.integers(0, 5)) == 0:
            nodes.cordoned(name)
        running_gpus[name] = draw(st.lists(st.integers(0, gpus - 1), unique=True)) if gpus else []
        running_cpu[name] = draw(st.integers(0, cpu))
        running_memory[name] = draw(st.integers(0, memory))

    queue_names = [f"q{i}" for i in range(draw(st.integers(1, 3)))]
    queues = []
    for name in queue_names:
        q = queue(name).using(draw(st.integers(0, 6)))
        q.quota(draw(st.none() | st.integers(0, 16)))
        if draw(st.booleans()):
            q.best_effort()
        queues.append(q)

    pending = []
    for i in range(draw(st.integers(0, 10))):
        rare_missing = st.sampled_from(queue_names) if draw(st.integers(0, 9)) else st.just("gone")
        j = job(f"j{i}").queue(draw(rare_missing))
        j.priority(draw(st.integers(0, 2))).submitted(float(draw(st.integers(0, 4))))
        total = 0
        for t in range(draw(st.integers(1, 2))):
            replicas = draw(st.integers(1, 4))
            total += replicas
            j.task(
                f"t{t}",
                replicas,
                gpu=draw(st.integers(0, 4)),
                cpu_millis=draw(st.sampled_from([0, 500, 4000])),
                memory=draw(st.sampled_from([0, 1, 16])) * GIB,
                max_per_node=draw(st.sampled_from([None, None, 1, 2])),
            )
        j.gang(draw(st.integers(1, total)))
        pending.append(j)
    return snapshot(
        nodes=nodes,
        queues=queues,
        pending=pending,
        running_gpus=running_gpus,
        running_cpu=running_cpu,
        running_memory=running_memory,
    )


def admitted_gpus(snap: Snapshot, decisions: Decisions, queue_name: str) -> int:
    queue_of = {j.id: j.queue for j in snap.pending}
    return sum(
        len(p.gpu_ids)
        for a in decisions.admitted
        if queue_of[a.job_id] == queue_name
        for p in a.placements
    )


@FAST
@given(snapshots())
def test_queue_quota_is_never_exceeded(snap: Snapshot) -> None:
    decisions = schedule(snap)
    for q in snap.queues:
        gpus = admitted_gpus(snap, decisions, q.name)
        if q.nominal is not None and gpus > 0:
            assert sum(q.used.values()) + gpus <= sum(q.nominal.values())


@FAST
@given(snapshots())
def test_nodes_are_never_overcommitted(snap: Snapshot) -> None:
    decisions = schedule(snap)
    nodes = {n.name: n for n in snap.nodes}
    demand = {(j.id, t.name): t for j in snap.pending for t in j.tasks}
    gpus: dict[str, list[int]] = {}
    cpu: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    for admit in decisions.admitted:
        for p in admit.placements:
            task = demand[(admit.job_id, p.task)]
            assert (len(p.gpu_ids), p.cpu_millis, p.memory) == (
                task.gpu,
                task.cpu_millis,
                task.memory,
            )
            assert nodes[p.node].schedulable
            gpus.setdefault(p.node, []).extend(p.gpu_ids)
            cpu[p.node] += p.cpu_millis
            memory[p.node] += p.memory
    for name, ids in gpus.items():
        assert len(ids) == len(set(ids)), f"GPU handed out twice on {name}: {ids}"
        assert set(ids) <= set(nodes[name].free_gpu_ids)
    for name in cpu:
        assert cpu[name] <= nodes[name].free_cpu_millis
        assert memory[name] <= nodes[name].free_memory


@FAST
@given(snapshots())
def test_admitted_jobs_get_their_gang_and_waiting_jobs_nothing(snap: Snapshot) -> None:
    decisions = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    for admit in decisions.admitted:
        pending = jobs[admit.job_id]
        replicas = {t.name: t.replicas for t in pending.tasks}
        assert pending.gang_size <= len(admit.placements) <= pending.total_replicas
        assert [p.rank for p in admit.placements] == list(range(len(admit.placements)))
        slots = [(p.task, p.index) for p in admit.placements]
        assert len(slots) == len(set(slots))
        assert all(index < replicas[task] for task, index in slots)
    waiting = {w.job_id for w in decisions.waiting}
    assert waiting.isdisjoint(a.job_id for a in decisions.admitted)


@FAST
@given(snapshots())
def test_every_pending_job_gets_exactly_one_decision(snap: Snapshot) -> None:
    decisions = schedule(snap)
    decided = [a.job_id for a in decisions.admitted] + [w.job_id for w in decisions.waiting]
    assert sorted(decided) == sorted(j.id for j in snap.pending)
    positions: dict[str, list[int]] = {}
    for w in decisions.waiting:
        positions.setdefault(next(j.queue for j in snap.pending if j.id == w.job_id), []).append(
            w.queue_position
        )
    for numbers in positions.values():
        assert numbers == list(range(1, len(numbers) + 1))


@FAST
@given(snapshots(), st.randoms(use_true_random=False))
def test_same_snapshot_same_decisions(snap: Snapshot, rnd: random.Random) -> None:
    first = schedule(snap)
    assert schedule(snap) == first
    pending, nodes, queues = list(snap.pending), list(snap.nodes), list(snap.queues)
    rnd.shuffle(pending)
    rnd.shuffle(nodes)
    rnd.shuffle(queues)
    reordered = dataclasses.replace(
        snap, pending=tuple(pending), nodes=tuple(nodes), queues=tuple(queues)
    )
    assert schedule(reordered) == first


@FAST
@given(snapshots())
def test_strict_queues_admit_nothing_behind_a_waiting_job(snap: Snapshot) -> None:
    decisions = schedule(snap)
    admitted = {a.job_id for a in decisions.admitted}
    strict = {q.name for q in snap.queues if q.strategy is QueueStrategy.STRICT_FIFO}
    never = {w.job_id for w in decisions.waiting if w.reason.code is ReasonCode.UNSCHEDULABLE}
    ordered = sorted(snap.pending, key=lambda j: (-j.priority, j.submitted_at, j.id))
    for name in strict:
        # A job that could never start holds nobody up; any other waiting job holds up those
        # behind it.
        in_queue = [j.id in admitted for j in ordered if j.queue == name and j.id not in never]
        assert in_queue == sorted(in_queue, reverse=True), f"queue {name}: {in_queue}"


@FAST
@given(snapshots())
def test_no_node_holds_more_of_a_task_than_its_max_per_node(snap: Snapshot) -> None:
    decisions = schedule(snap)
    demand = {(j.id, t.name): t for j in snap.pending for t in j.tasks}
    for admit in decisions.admitted:
        held = Counter((p.task, p.node) for p in admit.placements)
        for (task, node), count in held.items():
            limit = demand[(admit.job_id, task)].max_per_node
            assert limit is None or count <= limit, f"{admit.job_id}/{task}: {count} on {node}"


NOT_JUDGED = (
    ReasonCode.QUEUE_NOT_FOUND,
    ReasonCode.BLOCKED_BY_QUEUE_HEAD,
    ReasonCode.QUEUE_BACKLOG,
)


def on_idle_nodes(snap: Snapshot, pending: PendingJob) -> Snapshot:
    """The snapshot's nodes all idle and taking work, its queues using nothing, one job."""
    nodes = tuple(
        dataclasses.replace(
            n,
            free_gpu_ids=tuple(range(n.gpus)),
            free_cpu_millis=n.cpu_millis,
            free_memory=n.memory,
            schedulable=True,
        )
        for n in snap.nodes
    )
    queues = tuple(dataclasses.replace(q, used={}) for q in snap.queues)
    return dataclasses.replace(snap, nodes=nodes, queues=queues, pending=(pending,), running=())


@FAST
@given(snapshots())
def test_a_job_found_unschedulable_could_not_start_on_idle_nodes(snap: Snapshot) -> None:
    """Sound: "can never start" is never said of a job that idle nodes would take; and for a
    job of one task (where the check is exact), said of every job they would not take."""
    decisions = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    for wait in decisions.waiting:
        pending = jobs[wait.job_id]
        if wait.reason.code in NOT_JUDGED:
            continue
        started = bool(schedule(on_idle_nodes(snap, pending)).admitted)
        if wait.reason.code is ReasonCode.UNSCHEDULABLE:
            assert not started, wait.reason.message
        elif len(pending.tasks) == 1:
            assert started, wait.reason.message
