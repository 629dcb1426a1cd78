"""Threshold-shaped order grounds (SRTF's, LAS's: ``ThresholdGround``) answer as the predicates
they replaced, their victims found through the per-cycle ``ThresholdIndex`` are those the
predicate asked of every running job chose, and a search that could never free enough GPUs
is refused by arithmetic, without walking its candidates."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_order_ground import contended, outcome, plain_candidates

from kiban.scheduler import Snapshot, schedule
from kiban.scheduler import preemption as preemption_module
from kiban.scheduler.attained_service import attained_now, las_level
from kiban.scheduler.cycle import Cycle
from kiban.scheduler.order_ground import ThresholdGround
from kiban.scheduler.policy import MayPreempt, Policy
from kiban.scheduler.preemption import candidates, find_victims
from kiban.scheduler.snapshot import PendingJob, RunningJob
from kiban.sim.policies import las_may_preempt, srtf_may_preempt, within_partition
from kiban.testing import cluster, job, queue, running, snapshot

FAST = settings(max_examples=120, deadline=None)


def srtf_as_before(waiting: PendingJob, running: RunningJob, now: float) -> bool:
    """``srtf_may_preempt`` as it read before it became a ``ThresholdGround``."""
    if waiting.priority < running.priority or waiting.max_runtime is None:
        return False
    left = math.inf if running.max_runtime is None else running.max_runtime
    left -= 0.0 if running.max_runtime is None else now - running.started_at
    return waiting.max_runtime < left


def las_as_before(waiting: PendingJob, running: RunningJob, now: float) -> bool:
    """``las_may_preempt`` (the simulator's) as it read before."""
    if waiting.priority < running.priority:
        return False
    return las_level(waiting.attained_service) < las_level(attained_now(running, now))


def partitioned_as_before(may_preempt: MayPreempt, snap: Snapshot) -> MayPreempt:
    """``within_partition`` as it read before: a closure around the predicate."""
    unlimited = frozenset(q.name for q in snap.queues if q.nominal is None)

    def scoped(waiting: PendingJob, running: RunningJob, now: float) -> bool:
        if waiting.queue != running.queue and waiting.queue not in unlimited:
            return False
        return may_preempt(waiting, running, now)

    return scoped


GROUNDS = [(srtf_may_preempt, srtf_as_before), (las_may_preempt, las_as_before)]


@FAST
@given(contended(), st.sampled_from(GROUNDS), st.booleans())
def test_a_threshold_ground_answers_as_the_predicate_it_replaced(
    snap: Snapshot, grounds: tuple[ThresholdGround, MayPreempt], partitioned: bool
) -> None:
    ground, before = grounds
    new: MayPreempt = ground
    if partitioned:
        new, before = within_partition(ground, snap.queues), partitioned_as_before(before, snap)
        assert isinstance(new, ThresholdGround)  # its parts still in view of the search
    for waiting in snap.pending:
        for victim in snap.running:
            for now in (snap.now, snap.now + 7000.0):
                assert new(waiting, victim, now) == before(waiting, victim, now)


@FAST
@given(contended(), st.sampled_from([srtf_may_preempt, las_may_preempt]), st.booleans())
def test_victims_found_through_the_index_are_those_the_predicate_chose(
    snap: Snapshot, ground: ThresholdGround, partitioned: bool
) -> None:
    # The search with the index and the arithmetic refusal against the search that asks the
    # predicate of every running job after the merge and walks every candidate.
    may_preempt = within_partition(ground, snap.queues) if partitioned else ground
    policy = Policy(may_preempt=may_preempt)
    fast = outcome(schedule(snap, policy))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preemption_module, "candidates", plain_candidates)
        patch.setattr(preemption_module, "gang_gpus", lambda _job: 0)  # never refused early
        assert fast == outcome(schedule(snap, policy))
    cycle = Cycle.start(snap, policy)
    for waiting in snap.pending:
        if waiting.queue in cycle.queues:
            assert list(candidates(cycle, waiting, "default")) == list(
                plain_candidates(cycle, waiting, "default")
            )


def _crowded(waiting: int, replicas: int = 1) -> Snapshot:
    """Two full 8-GPU nodes of one queue's 2-GPU jobs, and ``waiting`` jobs of ``replicas``
    replicas of 4 GPUs each."""
    nodes = cluster().nodes(2, gpus=8, prefix="n")
    runs = [
        running(f"r{i}")
        .queue("qa")
        .started(float(i))
        .max_runtime(10_000.0)
        .on(f"n-{i // 4}", gpus=2)
        for i in range(8)
    ]
    pending = [
        job(f"p{i}").queue("qa").replicas(replicas, gpu=4).submitted(float(i)).max_runtime(100.0)
        for i in range(waiting)
    ]
    qa = queue("qa").best_effort()
    return snapshot(nodes=nodes, queues=[qa], running=runs, pending=pending, now=1000.0)


def test_a_cycle_reads_each_running_jobs_level_once_whatever_its_searches() -> None:
    # Eight waiting jobs each search for victims among eight running jobs: the ground's level
    # is read once per running job in the cycle, not once per search.
    calls: list[str] = []

    def level(victim: RunningJob, now: float) -> float:
        calls.append(victim.id)
        return srtf_may_preempt.level(victim, now)

    counting = replace(srtf_may_preempt, level=level)
    decisions = schedule(_crowded(8), Policy(may_preempt=counting, max_preemption_searches=8))
    assert len(decisions.preempted) == 4  # two searches found room (two victims each), six not
    assert sorted(calls) == sorted(f"r{i}" for i in range(8))


def test_a_search_that_could_never_free_enough_gpus_walks_no_candidate() -> None:
    # 16 GPUs are held and none is free: a gang of 5 x 4 GPUs never fits, whatever is stopped.
    snap = _crowded(1, replicas=5)
    cycle = Cycle.start(snap, Policy(may_preempt=srtf_may_preempt))
    walked: list[object] = []

    def walk(*args: object) -> Iterator[object]:
        walked.append(args)
        return iter(())

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preemption_module, "candidates", walk)
        assert find_victims(cycle, snap.pending[0], "default") is None
    assert walked == []
