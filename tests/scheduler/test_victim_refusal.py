"""A victim search of the scavenger, priority, reclaim and fair-share grounds is refused by
arithmetic before its candidate lists are gathered when no job of its grounds' queues may still
be stopped, or when those jobs hold too few GPUs; the cohort's borrowers and each queue's
stoppable jobs are kept across the cycle's searches, and found again when the quota or the
victims change. The cycle's decisions are those of the search without the refusal."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_order_ground import contended, outcome
from test_victim_count import plain_find_victims

from kiban.scheduler import Snapshot, schedule
from kiban.scheduler import core as core_module
from kiban.scheduler import preemption as preemption_module
from kiban.scheduler.cycle import Cycle
from kiban.scheduler.policy import Policy
from kiban.scheduler.preemption import find_victims
from kiban.scheduler.victim_sources import borrowers as _borrowers
from kiban.scheduler.victim_sources import stoppable as _stoppable
from kiban.testing import cluster, job, queue, running, snapshot
from kiban.testing.job_builders import RunningBuilder

FAST = settings(max_examples=150, deadline=None)
KIBAN_LIKE = [
    Policy(),
    Policy(max_preemption_searches=2),
    Policy(admission_charge_s=0.0),
    Policy(backfill=False),
]


@st.composite
def cohort_contended(draw: st.DrawFn) -> Snapshot:
    """``contended`` clusters with the tenants' standings drawn (so that fair share reaches
    some queues and not others) and, sometimes, the queue without quota a scavenger queue."""
    snap = draw(contended())
    standings = {t: float(draw(st.sampled_from([0, 10, 1000]))) for t in ("t1", "t2", "t3")}
    queues = snap.queues
    if draw(st.booleans()):
        queues = tuple(replace(q, scavenger=True) if q.name == "qc" else q for q in queues)
    return replace(snap, standings=standings, queues=queues)


@st.composite
def lent_and_borrowed(draw: st.DrawFn) -> Snapshot:
    """Full 8-GPU nodes (a few GPUs left free) held by two queues of one cohort, one borrowing
    a little of what the other lends, and gangs of both waiting: reclaims and fair-share
    searches that stop taking from a queue as soon as it no longer borrows."""
    count = draw(st.integers(2, 4))
    nodes = cluster().nodes(count, gpus=8, prefix="n")
    runs: list[RunningBuilder] = []
    for n in range(count):
        left = 8 - draw(st.integers(0, 3))
        while left:
            gpus = min(left, draw(st.sampled_from([1, 2, 4])))
            left -= gpus
            r = running(f"r{len(runs)}").queue(draw(st.sampled_from(["qa", "qb"])))
            runs.append(r.started(float(draw(st.integers(0, 50)))).on(f"n-{n}", gpus=gpus))
    total = 8 * count
    nominal = draw(st.integers(0, total))
    qa = queue("qa").tenant("ta").cohort("c").quota(nominal).best_effort()
    qb = queue("qb").tenant("tb").cohort("c").quota(total - nominal).best_effort()
    pending = [
        job(f"p{i}")
        .queue(draw(st.sampled_from(["qa", "qb"])))
        .replicas(draw(st.integers(1, 2)), gpu=draw(st.sampled_from([2, 4, 8])))
        .submitted(float(i))
        for i in range(draw(st.integers(1, 4)))
    ]
    standings = {"ta": float(draw(st.sampled_from([0, 50]))), "tb": 10.0}
    return snapshot(
        nodes=nodes, queues=[qa, qb], running=runs, pending=pending, now=100.0, standings=standings
    )


def _decides_as_walking_every_candidate(snap: Snapshot, policy: Policy) -> None:
    """The cycle's decisions with the refusals equal those of a search walking every
    candidate (``plain_find_victims``)."""
    fast = outcome(schedule(snap, policy))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core_module, "find_victims", plain_find_victims)
        assert fast == outcome(schedule(snap, policy))


@FAST
@given(cohort_contended(), st.sampled_from(KIBAN_LIKE))
def test_searches_refused_before_gathering_decide_as_searches_that_walk_every_candidate(
    snap: Snapshot, policy: Policy
) -> None:
    _decides_as_walking_every_candidate(snap, policy)


@settings(max_examples=400, deadline=None)
@given(lent_and_borrowed(), st.sampled_from(KIBAN_LIKE[:2]))
def test_searches_refused_by_what_a_cohort_borrows_decide_as_those_that_walk_it(
    snap: Snapshot, policy: Policy
) -> None:
    _decides_as_walking_every_candidate(snap, policy)


def _borrowed_cluster(protected: bool, waiting: int = 1) -> Snapshot:
    """Two full 8-GPU nodes held by queue qb's 2-GPU jobs (qb borrows: its quota is 4 GPUs, qa
    lends 12), their minRuntime over or not; ``waiting`` jobs of qa of 8 GPUs, within nominal."""
    nodes = cluster().nodes(2, gpus=8, prefix="n")
    runs = []
    for i in range(8):
        r = running(f"r{i}").queue("qb").started(float(i)).on(f"n-{i // 4}", gpus=2)
        if protected:
            r.protected_until(10_000.0)
        runs.append(r)
    qa = queue("qa").tenant("ta").cohort("c").quota(12)
    qb = queue("qb").tenant("tb").cohort("c").quota(4)
    pending = [
        job(f"p{i}").queue("qa").replicas(1, gpu=8).submitted(float(i)) for i in range(waiting)
    ]
    return snapshot(nodes=nodes, queues=[qa, qb], running=runs, pending=pending, now=1000.0)


def _gathers(patch: pytest.MonkeyPatch) -> list[str]:
    """The jobs whose searches gather their candidate lists from now on."""
    gathered: list[str] = []
    gather = preemption_module._gather

    def counting(cycle: Cycle, job: object, flavor: str, *rest: object) -> object:
        gathered.append(getattr(job, "id", "?"))
        return gather(cycle, job, flavor, *rest)  # type: ignore[arg-type]

    patch.setattr(preemption_module, "_gather", counting)
    return gathered


def test_a_search_whose_victims_are_all_inside_their_min_runtime_gathers_nothing() -> None:
    # qb borrows and qa may reclaim, but every qb job is protected: no victim to find.
    snap = _borrowed_cluster(protected=True)
    cycle = Cycle.start(snap, Policy())
    with pytest.MonkeyPatch.context() as patch:
        gathered = _gathers(patch)
        assert find_victims(cycle, snap.pending[0], "default") is None
    assert gathered == []


def test_gpus_taken_by_an_earlier_search_of_the_cycle_no_longer_count() -> None:
    # Three 8-GPU jobs preempt lower-priority jobs of their own queue, which hold 16 GPUs. The
    # first two searches find four victims each; the third could only free GPUs already taken.
    nodes = cluster().nodes(2, gpus=8, prefix="n")
    runs = [
        running(f"r{i}").queue("qa").priority(10).started(float(i)).on(f"n-{i // 4}", gpus=2)
        for i in range(8)
    ]
    pending = [
        job(f"p{i}").queue("qa").priority(1000).preempts().replicas(1, gpu=8).submitted(float(i))
        for i in range(3)
    ]
    snap = snapshot(
        nodes=nodes, queues=[queue("qa").best_effort()], running=runs, pending=pending, now=100.0
    )
    with pytest.MonkeyPatch.context() as patch:
        gathered = _gathers(patch)
        decisions = schedule(snap, Policy())
    assert sorted(p.victim_id for p in decisions.preempted) == [f"r{i}" for i in range(8)]
    assert gathered == ["p0", "p1"]


def test_the_cohorts_borrowers_follow_the_quota_within_a_cycle() -> None:
    snap = _borrowed_cluster(protected=False)
    cycle = Cycle.start(snap, Policy())
    assert [q.name for q in _borrowers(cycle, "c", "default")] == ["qb"]
    with cycle.quota.transaction():
        cycle.quota.give("qb", "default", 12)  # qb back within its nominal 4
        assert _borrowers(cycle, "c", "default") == []
        cycle.quota.take("qa", "default", 14)  # qa beyond its 12
        assert [q.name for q in _borrowers(cycle, "c", "default")] == ["qa"]
    assert [q.name for q in _borrowers(cycle, "c", "default")] == ["qb"]


def test_a_queues_stoppable_jobs_follow_the_cycles_victims() -> None:
    snap = _borrowed_cluster(protected=False)
    cycle = Cycle.start(snap, Policy())
    left = _stoppable(cycle, "qb", "default")
    assert (left.jobs, left.held) == (8, 16)
    by_id = {r.id: r for r in snap.running}
    cycle.preempt_for(snap.pending[0], "default", [by_id["r0"], by_id["r5"]], frozenset({"n-0"}))
    left = _stoppable(cycle, "qb", "default")
    assert (left.jobs, left.held) == (6, 12)


def test_a_search_no_node_could_make_room_on_gathers_nothing() -> None:
    # 8 GPUs could be freed in all (4 idle, 4 of a job past its minRuntime), but on two nodes:
    # no node could hold the 8-GPU replica, whoever is stopped.
    nodes = cluster().nodes(2, gpus=8, prefix="n")
    runs = [
        running("r0").queue("qb").on("n-0", gpus=4).protected_until(10_000.0),
        running("r1").queue("qb").on("n-1", gpus=4),
        running("r2").queue("qb").on("n-1", gpus=4).protected_until(10_000.0),
    ]
    qa = queue("qa").tenant("ta").cohort("c").quota(12)
    qb = queue("qb").tenant("tb").cohort("c").quota(4)
    waiting = job("p0").queue("qa").replicas(1, gpu=8)
    snap = snapshot(nodes=nodes, queues=[qa, qb], running=runs, pending=[waiting], now=1000.0)
    cycle = Cycle.start(snap, Policy())
    with pytest.MonkeyPatch.context() as patch:
        gathered = _gathers(patch)
        assert find_victims(cycle, snap.pending[0], "default") is None
    assert gathered == []
