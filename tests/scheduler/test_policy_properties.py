"""Properties over random cohorts, flavors and running work, across several simulated cycles:
quotas and borrowing limits hold, no two jobs preempt each other back and forth, the same
inputs give the same decisions, and backfill never starves the largest waiting gang."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kiban.scheduler import Decisions, Snapshot, schedule
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.forward import advance, finish
from kiban.scheduler.policy import Policy
from kiban.scheduler.reasons import ReasonCode
from kiban.scheduler.snapshot import QueueView
from kiban.testing import cluster, job, queue, running, snapshot

FAST = settings(max_examples=60, deadline=None)
FLAVORS = ("h100", "a100")


@st.composite
def cohort_snapshots(draw: st.DrawFn) -> Snapshot:
    """Two flavors of 8-GPU nodes, queues in one or two cohorts, running jobs within nominal."""
    nodes = cluster()
    node_names: dict[str, list[str]] = {f: [] for f in FLAVORS}
    for flavor in FLAVORS:
        count = draw(st.integers(1, 3))
        nodes.nodes(count, gpus=8, prefix=flavor, flavor=flavor)
        node_names[flavor] = [f"{flavor}-{i}" for i in range(count)]
    queues = []
    runs = []
    free = {n: 8 for names in node_names.values() for n in names}
    for i in range(draw(st.integers(2, 4))):
        name = f"q{i}"
        tenant = f"t{i % 3}"
        q = queue(name).tenant(tenant).cohort(f"c{draw(st.integers(0, 1))}")
        if draw(st.booleans()):
            q.best_effort()
        for flavor in FLAVORS:
            nominal = draw(st.integers(0, 12))
            q.nominal(flavor, nominal)
            if draw(st.integers(0, 2)) == 0:
                q.borrowing_limit(flavor, draw(st.integers(0, 8)))
            if draw(st.integers(0, 2)) == 0:
                q.lending_limit(flavor, draw(st.integers(0, nominal)))
            # A running job of this queue within its nominal quota.
            gpus = draw(st.integers(0, min(nominal, 8)))
            spots = [n for n in node_names[flavor] if free[n] >= gpus]
            if gpus and spots:
                node = draw(st.sampled_from(spots))
                free[node] -= gpus
                runs.append(
                    running(f"r{i}{flavor}")
                    .queue(name)
                    .tenant(tenant)
                    .priority(draw(st.sampled_from([100, 1000])))
                    .started(float(draw(st.integers(0, 50))))
                    .max_runtime(float(draw(st.integers(10, 200))))
                    .on(node, gpus=gpus)
                )
        queues.append(q)
    pending = []
    for i in range(draw(st.integers(1, 8))):
        q = draw(st.sampled_from(queues))
        replicas = draw(st.integers(1, 3))
        j = (
            job(f"p{i}")
            .queue(q.name)
            .tenant(q._tenant)
            .replicas(replicas, gpu=draw(st.sampled_from([1, 2, 4, 8])))
            .priority(draw(st.sampled_from([100, 1000, 10000])))
            .submitted(float(draw(st.integers(0, 60))))
            .max_runtime(float(draw(st.integers(10, 300))))
        )
        if draw(st.booleans()):
            j.preempts()
        pending.append(j)
    standings = {f"t{i}": float(draw(st.integers(0, 100_000))) for i in range(3)}
    return snapshot(
        nodes=nodes, queues=queues, running=runs, pending=pending, standings=standings, now=60.0
    )


def usage_after(snap: Snapshot, decisions: Decisions) -> dict[tuple[str, str], int]:
    used = {(q.name, f): g for q in snap.queues for f, g in q.used.items()}
    for admit in decisions.admitted:
        job_queue = next(j.queue for j in snap.pending if j.id == admit.job_id)
        key = (job_queue, admit.flavor)
        used[key] = used.get(key, 0) + sum(len(p.gpu_ids) for p in admit.placements)
    for p in decisions.preempted:  # victims stop; their GPUs no longer count
        victim = next(r for r in snap.running if r.id == p.victim_id)
        for flavor, gpus in victim.flavor_gpus.items():
            used[(victim.queue, flavor)] -= gpus
    return used


def check_quotas(queues: tuple[QueueView, ...], used: dict[tuple[str, str], int]) -> None:
    by_cohort: dict[str, list[QueueView]] = {}
    for q in queues:
        assert q.cohort is not None and q.nominal is not None
        by_cohort.setdefault(q.cohort, []).append(q)
        for flavor in FLAVORS:
            limit = q.borrowing_limit.get(flavor)
            if limit is not None:
                assert used.get((q.name, flavor), 0) <= q.nominal.get(flavor, 0) + limit
    # Each queue keeps nominal - lendingLimit to itself and shares the rest with its cohort;
    # what members use beyond their own part never exceeds what they share.
    for members in by_cohort.values():
        for flavor in FLAVORS:
            drawn = 0
            pool = 0
            for q in members:
                assert q.nominal is not None
                nominal = q.nominal.get(flavor, 0)
                cap = q.lending_limit.get(flavor)
                shared = nominal if cap is None else min(cap, nominal)
                pool += shared
                drawn += max(used.get((q.name, flavor), 0) - (nominal - shared), 0)
            assert drawn <= pool


@FAST
@given(cohort_snapshots())
def test_quotas_borrowing_and_lending_limits_hold(snap: Snapshot) -> None:
    decisions = schedule(snap)
    check_quotas(snap.queues, usage_after(snap, decisions))


@FAST
@given(cohort_snapshots())
def test_gangs_are_all_or_nothing_and_nodes_never_overcommitted(snap: Snapshot) -> None:
    decisions = schedule(snap)
    free = {n.name: set(n.free_gpu_ids) for n in snap.nodes}
    pending = {j.id: j for j in snap.pending}
    for admit in decisions.admitted:
        assert len(admit.placements) >= pending[admit.job_id].gang_size
        for p in admit.placements:
            assert set(p.gpu_ids) <= free[p.node]
            free[p.node] -= set(p.gpu_ids)
    started = {a.job_id for a in decisions.admitted}
    assert started.isdisjoint(w.job_id for w in decisions.waiting)


@FAST
@given(cohort_snapshots(), st.randoms(use_true_random=False))
def test_same_inputs_same_decisions(snap: Snapshot, rnd: random.Random) -> None:
    shuffled = list(snap.pending)
    rnd.shuffle(shuffled)
    running_jobs = list(snap.running)
    rnd.shuffle(running_jobs)
    other = dataclasses.replace(snap, pending=tuple(shuffled), running=tuple(running_jobs))
    assert schedule(snap) == schedule(other)


@FAST
@given(cohort_snapshots())
def test_no_two_jobs_preempt_each_other_back_and_forth(snap: Snapshot) -> None:
    """Over cycles in which preempted jobs return to their queues, a victim never preempts
    the job that preempted it, and quotas keep holding."""
    pairs: set[tuple[str, str]] = set()
    state = snap
    for _ in range(8):
        decisions = schedule(state)
        for p in decisions.preempted:
            assert (p.preemptor_id, p.victim_id) not in pairs, (p, pairs, state.standings)
            pairs.add((p.victim_id, p.preemptor_id))
        check_quotas(state.queues, usage_after(state, decisions))
        state = advance(state, decisions)
        if not decisions.preempted and not decisions.admitted:
            break


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(0, 10_000), st.sampled_from([2, 3, 4]))
def test_backfill_never_starves_the_largest_waiting_gang(
    small_per_step: int, seed: int, big_nodes: int
) -> None:
    """A stream of 1-GPU jobs keeps arriving; a gang needing whole nodes still starts."""
    rnd = random.Random(seed)
    state = snapshot(
        nodes=cluster().nodes(4, gpus=4),
        queues=[queue("q").best_effort()],
        pending=[job("big").queue("q").replicas(big_nodes, gpu=4).max_runtime(50).submitted(0)],
    )
    now = 0.0
    for step in range(60):
        arrivals = [
            job(f"s{step}-{i}")
            .queue("q")
            .replicas(1, gpu=1)
            .max_runtime(float(rnd.randint(5, 40)))
            .submitted(now + 1 + i)
            .build()
            for i in range(small_per_step)
        ]
        state = dataclasses.replace(state, pending=(*state.pending, *arrivals))
        decisions = schedule(state)
        if any(a.job_id == "big" for a in decisions.admitted):
            return
        state = advance(state, decisions)
        ends = sorted(r.expected_end for r in state.running if r.expected_end is not None)
        now = ends[0] if ends else now + 1
        ended = {
            r.id for r in state.running if r.expected_end is not None and r.expected_end <= now
        }
        state = finish(state, ended, now)
    raise AssertionError("the big gang never started")


@FAST
@given(cohort_snapshots(), st.randoms(use_true_random=False))
def test_a_kept_capacity_cache_changes_no_decision(snap: Snapshot, rnd: random.Random) -> None:
    """Cycle after cycle, with nodes cordoned and jobs ending between them, the core decides
    the same with its capacity index kept between calls as with one built afresh."""
    cache = CapacityCache()
    state = snap
    for _ in range(6):
        decisions = schedule(state, cache=cache)
        assert decisions == schedule(state)
        state = advance(state, decisions)
        nodes = list(state.nodes)
        i = rnd.randrange(len(nodes))
        nodes[i] = dataclasses.replace(nodes[i], schedulable=not nodes[i].schedulable)
        state = dataclasses.replace(state, nodes=tuple(nodes))
        ends = sorted(r.expected_end for r in state.running if r.expected_end is not None)
        if ends:
            done = {r.id for r in state.running if r.expected_end == ends[0]}
            state = finish(state, done, max(state.now, ends[0]))


@FAST
@given(cohort_snapshots(), st.integers(1, 6))
def test_a_placement_budget_bounds_each_cycle(snap: Snapshot, budget: int) -> None:
    """A cycle stops admitting once it has placed its budget of replicas; the jobs it did not
    reach wait as unconsidered, and it says so."""
    policy = Policy(max_placements_per_cycle=budget)
    decisions = schedule(snap, policy)
    placed = [len(a.placements) for a in decisions.admitted]
    assert sum(placed[:-1]) < budget  # only the last admission may cross the budget
    unconsidered = [w for w in decisions.waiting if w.reason.code is ReasonCode.QUEUE_BACKLOG]
    assert decisions.more == bool(unconsidered)
    if decisions.more:
        assert sum(placed) >= budget
    assert len(decisions.admitted) + len(decisions.waiting) == len(snap.pending)
