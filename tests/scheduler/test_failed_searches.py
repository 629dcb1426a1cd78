"""A victim search on a threshold ground (SRTF's, LAS's) that found no room is kept for the
rest of its cycle: a later search of the same queue, shape, priority and bound finds the same
nothing, as long as nothing it reads has changed, and is answered without gathering or walking
its candidates. The answers are those of searching afresh."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_order_ground import contended, outcome

from kiban.scheduler import Snapshot, schedule
from kiban.scheduler import preemption as preemption_module
from kiban.scheduler.order_ground import ThresholdGround
from kiban.scheduler.policy import Policy
from kiban.scheduler.preemption import Candidate
from kiban.sim.policies import las_may_preempt, srtf_may_preempt, within_partition
from kiban.testing import cluster, job, queue, running, snapshot

FAST = settings(max_examples=120, deadline=None)


@FAST
@given(
    contended(),
    st.sampled_from([srtf_may_preempt, las_may_preempt]),
    st.booleans(),
    st.sampled_from([0.0, 1.0]),
)
def test_searches_answered_from_the_kept_failures_choose_as_fresh_searches(
    snap: Snapshot, ground: ThresholdGround, partitioned: bool, charge: float
) -> None:
    may_preempt = within_partition(ground, snap.queues) if partitioned else ground
    policy = Policy(may_preempt=may_preempt, admission_charge_s=charge)
    kept = outcome(schedule(snap, policy))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preemption_module, "_search_key", lambda *_args: None)
        patch.setattr(preemption_module, "_job_key", lambda *_args: None)
        assert kept == outcome(schedule(snap, policy))


def _tight(waiting: int, gpus: int) -> Snapshot:
    """Two full 8-GPU nodes of one queue's long 2-GPU jobs, the first on each inside its
    minRuntime; ``waiting`` short one-replica jobs of ``gpus`` GPUs each, and one short job of
    2 GPUs submitted last."""
    nodes = cluster().nodes(2, gpus=8, prefix="n")
    runs = [
        running(f"r{i}")
        .queue("qa")
        .started(float(i))
        .max_runtime(10_000.0)
        .on(f"n-{i // 4}", gpus=2)
        .protected_until(5000.0 if i % 4 == 0 else 0.0)
        for i in range(8)
    ]
    pending = [
        job(f"p{i}").queue("qa").replicas(1, gpu=gpus).submitted(float(i)).max_runtime(100.0)
        for i in range(waiting)
    ]
    pending.append(job("small").queue("qa").replicas(1, gpu=2).submitted(99.0).max_runtime(50.0))
    qa = queue("qa").best_effort()
    return snapshot(nodes=nodes, queues=[qa], running=runs, pending=pending, now=1000.0)


@pytest.mark.parametrize("charge", [0.0, 1.0])
def test_a_search_like_one_that_failed_walks_no_candidate_again(charge: float) -> None:
    # Six jobs of 8 GPUs on one replica: the 12 GPUs that may be stopped could hold one by
    # arithmetic, but no node would have 8. The first search walks its candidates and fails;
    # the five alike are answered by it. The 2-GPU job behind them still searches and preempts.
    snap = _tight(6, gpus=8)
    walks: list[str] = []
    real = preemption_module.candidates

    def counting(*args: object) -> Iterator[Candidate]:
        walks.append(str(args[1]))
        return real(*args)  # type: ignore[arg-type]

    policy = Policy(
        may_preempt=srtf_may_preempt,
        admission_charge_s=charge,
        backfill=False,  # (as SRTF and LAS replays: no reservation keeps "small" off a node)
        max_preemption_searches=10,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preemption_module, "candidates", counting)
        decisions = schedule(snap, policy)
    assert [(p.victim_id, p.preemptor_id) for p in decisions.preempted] == [("r7", "small")]
    assert len(walks) == 2 and "'p0'" in walks[0] and "'small'" in walks[1]


def test_a_failure_kept_before_the_lists_are_gathered_under_a_zero_charge() -> None:
    # SRTF and LAS charge no standing in a cycle: a job like the one that failed (the same
    # queue, shape, priority and bound) is answered before its candidate lists are gathered.
    snap = _tight(6, gpus=8)
    gathered: list[str] = []
    real = preemption_module._gather

    def counting(cycle: object, waiting: object, flavor: str) -> object:
        gathered.append(str(waiting))
        return real(cycle, waiting, flavor)  # type: ignore[arg-type]

    policy = Policy(may_preempt=las_may_preempt, admission_charge_s=0.0, backfill=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preemption_module, "_gather", counting)
        schedule(snap, policy)
    assert len(gathered) == 2  # p0, then the 2-GPU job; p1..p5 answered by p0's failure
