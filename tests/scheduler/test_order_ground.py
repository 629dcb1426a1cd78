"""The order ground's victims (``Policy.may_preempt``: SRTF, LAS) filtered in their queue's
group, before the merge, are the victims the search filtering after the merge took: on random
contended clusters with cohorts, borrowing, protected and just-preempted jobs, every cycle's
admissions, victims and waits are equal."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import replace

import pytest
from busy_nodes import busy_runs
from hypothesis import given, settings
from hypothesis import strategies as st

from kiban.scheduler import Snapshot, schedule
from kiban.scheduler import preemption as preemption_module
from kiban.scheduler.attained_service import attained_now, las_level
from kiban.scheduler.cycle import Cycle
from kiban.scheduler.decisions import Decisions
from kiban.scheduler.fair_tree import FairTree
from kiban.scheduler.policy import Policy
from kiban.scheduler.preemption import (
    Candidate,
    PreemptionGround,
    _group,
    candidates,
)
from kiban.scheduler.snapshot import PendingJob, RunningJob
from kiban.testing import cluster, job, queue, running, snapshot

FAST = settings(max_examples=120, deadline=None)


def srtf_like(waiting: PendingJob, victim: RunningJob, now: float) -> bool:
    if waiting.priority < victim.priority or waiting.max_runtime is None:
        return False
    left = None if victim.max_runtime is None else victim.max_runtime - (now - victim.started_at)
    return left is None or waiting.max_runtime < left


def las_like(waiting: PendingJob, victim: RunningJob, now: float) -> bool:
    if waiting.priority < victim.priority:
        return False
    return las_level(waiting.attained_service) < las_level(attained_now(victim, now))


POLICIES = [
    Policy(may_preempt=srtf_like),
    Policy(may_preempt=las_like),
    Policy(may_preempt=las_like, max_preemption_searches=2),
    Policy(may_preempt=srtf_like, backfill=False),
]


def plain_candidates(
    cycle: Cycle, job: PendingJob, flavor: str, _gathered: object = None
) -> Iterator[Candidate]:
    """``candidates`` as it read before: every queue's running jobs merged, each victim's
    exclusions and the policy's predicate asked after the merge."""
    queue = cycle.queues[job.queue]
    if queue.scavenger:
        return
    now = cycle.snapshot.now
    nominal = cycle.quota.nominal(job.queue, flavor)
    within_nominal = (
        nominal is not None and cycle.quota.used(job.queue, flavor) + job.total_gpus <= nominal
    )
    standing_after = cycle.standing(job.tenant) + cycle.charge(job)
    tree = FairTree.of(cycle.snapshot, cycle.policy.admission_charge_s)
    groups = []
    for other in cycle.scavenger_queues():
        borrows = cycle.quota.borrowed(other.name, flavor) > 0
        groups.append(_group(cycle, other.name, flavor, PreemptionGround.SCAVENGER, borrows, now))
    if job.preempts:
        own_borrows = cycle.quota.borrowed(job.queue, flavor) > 0
        ground = PreemptionGround.PRIORITY
        groups.append(_group(cycle, job.queue, flavor, ground, own_borrows, now, job.priority))
    if queue.cohort is not None:
        for other in cycle.cohort_members(queue.cohort):
            if other.name == job.queue or cycle.quota.borrowed(other.name, flavor) <= 0:
                continue
            if within_nominal:
                ground = PreemptionGround.RECLAIM
                groups.append(_group(cycle, other.name, flavor, ground, True, now))
            elif job.preempted_by is None and tree.reaches(
                job, standing_after, other.tenant, cycle.standing(other.tenant)
            ):
                ground = PreemptionGround.FAIR_SHARE
                groups.append(_group(cycle, other.name, flavor, ground, True, now))
    may_preempt = cycle.policy.may_preempt
    if may_preempt is not None:
        if queue.nominal is None:
            names = sorted(cycle.queues)
        else:
            names = [job.queue]
            if queue.cohort is not None:
                names += [
                    q.name
                    for q in cycle.cohort_members(queue.cohort)
                    if q.name != job.queue and cycle.quota.borrowed(q.name, flavor) > 0
                ]
        for name in names:
            borrows = cycle.quota.borrowed(name, flavor) > 0
            groups.append(_group(cycle, name, flavor, PreemptionGround.ORDER, borrows, now))
    seen: set[str] = set()
    taken = cycle.victims
    for _key, (victim, ground) in heapq.merge(*groups, key=lambda item: item[0]):
        if victim.id in seen or victim.id in taken or victim.stopping:
            continue
        if victim.preempted_by is not None:
            continue
        if victim.id == job.preempted_by or now < victim.protected_until:
            continue
        if ground is PreemptionGround.FAIR_SHARE and not tree.outranks(
            job, standing_after, victim, cycle.standing(victim.tenant)
        ):
            continue
        if ground is PreemptionGround.ORDER and (
            may_preempt is None or not may_preempt(job, victim, now)
        ):
            continue
        seen.add(victim.id)
        yield victim, ground


QUEUES = ("qa", "qb", "qc")


@st.composite
def contended(draw: st.DrawFn) -> Snapshot:
    """Busy 8-GPU nodes; queues with and without quota sharing a cohort (so that reclaim and
    fair share stand beside the order ground, on the same victims); running jobs protected,
    stopping or just back from a preemption; waiting jobs that preempted or were preempted."""
    count = draw(st.integers(2, 6))
    nodes = cluster().nodes(count, gpus=8, prefix="n")
    names = [f"n-{i}" for i in range(count)]
    free = dict.fromkeys(names, 8)
    runs = busy_runs(
        draw,
        free,
        draw(st.integers(2 * count, 6 * count)),
        queues=QUEUES,
        priorities=(100, 100, 1000),
        started_by=5000,
        limits=(600, 3000, 9000),
    )
    for r in runs:
        r.attained(float(draw(st.sampled_from([0, 0, 4000, 20000]))))
        if not draw(st.integers(0, 5)):
            r.protected_until(float(draw(st.sampled_from([3000, 9000]))))
        if not draw(st.integers(0, 6)):
            r.preempted_by(f"p{draw(st.integers(0, 7))}")
    pending = []
    for i in range(draw(st.integers(2, 8))):
        j = (
            job(f"p{i}")
            .queue(draw(st.sampled_from(QUEUES)))
            .replicas(draw(st.integers(1, 3)), gpu=draw(st.sampled_from([1, 2, 4, 8])))
            .priority(draw(st.sampled_from([100, 1000])))
            .submitted(float(draw(st.integers(0, 60))))
            .attained(float(draw(st.sampled_from([0, 0, 5000]))))
        )
        if draw(st.integers(0, 3)):
            j.max_runtime(float(draw(st.sampled_from([300, 2000, 8000]))))
        if draw(st.booleans()):
            j.preempts()
        if not draw(st.integers(0, 4)):
            j.preempted_by(f"r{draw(st.integers(0, 4 * count))}")
        pending.append(j)
    qa = queue("qa").tenant("t1").cohort("c").quota(draw(st.sampled_from([0, 8, 16])))
    qb = queue("qb").tenant("t2").cohort("c").quota(draw(st.sampled_from([0, 8, 16])))
    if draw(st.booleans()):
        qa.best_effort()
    qc = queue("qc").tenant("t3").best_effort()
    snap = snapshot(nodes=nodes, queues=[qa, qb, qc], running=runs, pending=pending, now=6000.0)
    stopping = draw(st.sets(st.sampled_from([r.id for r in snap.running] or ["-"])))
    return replace(
        snap,
        running=tuple(replace(r, stopping=True) if r.id in stopping else r for r in snap.running),
    )


def outcome(decisions: Decisions) -> tuple[object, ...]:
    return (decisions.admitted, decisions.preempted, tuple(decisions.waiting), decisions.more)


@FAST
@given(contended(), st.sampled_from(POLICIES))
def test_order_ground_filtered_before_the_merge_chooses_the_victims_filtering_after_does(
    snap: Snapshot, policy: Policy
) -> None:
    fast = outcome(schedule(snap, policy))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preemption_module, "candidates", plain_candidates)
        assert fast == outcome(schedule(snap, policy))


@FAST
@given(contended(), st.sampled_from(POLICIES))
def test_each_jobs_candidates_are_those_filtered_after_the_merge(
    snap: Snapshot, policy: Policy
) -> None:
    # The candidates of every waiting job on a fresh cycle, read to the end: the same victims,
    # grounds and order (the cohort grounds' groups read the quota, which nothing changes here).
    cycle = Cycle.start(snap, policy)
    for waiting in snap.pending:
        if waiting.queue not in cycle.queues:
            continue
        assert list(candidates(cycle, waiting, "default")) == list(
            plain_candidates(cycle, waiting, "default")
        )


def test_a_victim_refused_by_the_predicate_is_never_taken_on_the_order_ground() -> None:
    # Two running jobs of qc (no quota): r-long has 5 GPU-hours attained (the last LAS level), r-new
    # none. A job needing 8 GPUs may preempt r-long only: it waits for room, r-new untouched.
    nodes = cluster().nodes(1, gpus=8, prefix="n")
    runs = [
        running("r-long").queue("qc").started(0.0).attained(20000.0).on("n-0", gpus=4),
        running("r-new").queue("qc").started(5990.0).on("n-0", gpus=4),
    ]
    pending = [job("p0").queue("qc").replicas(1, gpu=4).submitted(1.0)]
    snap = snapshot(
        nodes=nodes, queues=[queue("qc").best_effort()], running=runs, pending=pending, now=6000.0
    )
    decisions = schedule(snap, Policy(may_preempt=las_like))
    assert [(p.victim_id, p.preemptor_id) for p in decisions.preempted] == [("r-long", "p0")]
    assert decisions.preempted[0].reason.details["ground"] == PreemptionGround.ORDER.value
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preemption_module, "candidates", plain_candidates)
        assert outcome(schedule(snap, Policy(may_preempt=las_like))) == outcome(decisions)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4, 8]), min_size=1, max_size=4), st.data())
def test_a_running_jobs_gpus_summed_when_made_follow_its_replicas(
    sizes: list[int], data: st.DataObject
) -> None:
    # ``RunningJob.gpus`` is summed once, at construction: a job made with ``replace`` (as the
    # simulator and the live loop make them) counts its own replicas, not those it was made from.
    nodes = cluster().nodes(len(sizes), gpus=8, prefix="n")
    built = running("r")
    for k, size in enumerate(sizes):
        built.on(f"n-{k}", gpus=size)
    made = snapshot(nodes=nodes, running=[built]).running[0]
    assert made.gpus == sum(sizes)
    kept = data.draw(st.lists(st.sampled_from(made.replicas), max_size=4))
    changed = replace(made, replicas=tuple(kept))
    assert changed.gpus == sum(len(r.gpu_ids) for r in kept)
    assert replace(made, started_at=1.0).gpus == made.gpus
