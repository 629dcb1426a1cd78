"""The victim search that counts each victim's GPUs by arithmetic (``RoomCount``) and gives them
to the overlay only when the gang could fit chooses the victims, and the nodes, that the search
giving every victim back and trying the gang after each chooses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_paths import LEVELS, POLICIES, contended_snapshots, outcome

from kiban.scheduler import Snapshot, schedule
from kiban.scheduler import core as core_module
from kiban.scheduler.capacity import CapacityOverlay
from kiban.scheduler.cycle import Cycle
from kiban.scheduler.placement import RoomCount, could_fit
from kiban.scheduler.policy import Policy
from kiban.scheduler.preemption import (
    Candidate,
    PreemptionGround,
    VictimChoice,
    _extended,
    _release_capacity,
    _release_quota,
    candidates,
)
from kiban.scheduler.snapshot import PendingJob, RunningJob
from kiban.testing import cluster, job, queue, running, snapshot
from kiban.testing.job_builders import RunningBuilder

FAST = settings(max_examples=80, deadline=None)
COHORT_GROUNDS = (PreemptionGround.RECLAIM, PreemptionGround.FAIR_SHARE)


def _fits_now(cycle: Cycle, job: PendingJob, flavor: str, kept: tuple[str, ...]) -> bool:
    """Quota and placement of the gang on the overlay as it is, undone at once."""
    overlay = cycle.overlays[flavor]
    if not could_fit(job, overlay, kept):
        return False
    if not cycle.quota.check(job.queue, flavor, job.total_gpus).fits:
        return False
    with overlay.transaction():
        return cycle.try_place(job, flavor, cycle.reservation_filter(job.id)).fits


def plain_find_victims(cycle: Cycle, job: PendingJob, flavor: str) -> VictimChoice | None:
    """The victim search as it reads: each victim given back to the overlay and the quota, the
    gang tried after each; then each chosen victim but the last taken back, the last but one
    first, and kept only if the gang no longer fits without it."""
    overlay = cycle.overlays[flavor]
    kept = tuple(n for n in cycle.reserved_for_others(job.id) if overlay.schedules(n))
    chosen: list[Candidate] = []
    with overlay.transaction(), cycle.quota.transaction():
        for victim, ground in candidates(cycle, job, flavor):
            if ground in COHORT_GROUNDS and cycle.quota.borrowed(victim.queue, flavor) <= 0:
                continue
            chosen.append((victim, ground))
            _release_capacity(cycle, victim, flavor)
            _release_quota(cycle, victim, flavor)
            if not _fits_now(cycle, job, flavor, kept):
                continue
            for k in range(len(chosen) - 2, -1, -1):
                spared: RunningJob = chosen[k][0]
                with overlay.transaction() as tx, cycle.quota.transaction() as quota_tx:
                    for r in spared.replicas:
                        overlay.take_ids(r.node, r.gpu_ids, r.cpu_millis, r.memory, r.extended)
                    cycle.quota.take(spared.queue, flavor, spared.flavor_gpus.get(flavor, 0))
                    cycle.quota.take_extended(spared.queue, flavor, _extended(spared, flavor))
                    if not _fits_now(cycle, job, flavor, kept):
                        continue
                    tx.commit()
                    quota_tx.commit()
                del chosen[k]
            with overlay.transaction():
                attempt = cycle.try_place(job, flavor, cycle.reservation_filter(job.id))
            return VictimChoice(
                flavor, tuple(chosen), frozenset(p.node for p in attempt.placements)
            )
    return None


@st.composite
def crowded_snapshots(draw: st.DrawFn) -> Snapshot:
    """Full nodes in two blocks, held by many small low-priority jobs (some with a
    maxRuntime, so that gangs ahead in the order reserve nodes), and gangs of higher priority
    that may preempt them, some inside one block: victim searches that take several victims,
    spare some, and run beside reservations."""
    nodes = cluster()
    names: list[str] = []
    for block in ("b0", "b1"):
        count = draw(st.integers(1, 4))
        nodes.nodes(count, gpus=8, prefix=f"{block}n", topology=(block,))
        names += [f"{block}n-{i}" for i in range(count)]
    runs: list[RunningBuilder] = []
    for node in names:
        left = 8
        while left:
            gpus = min(left, draw(st.sampled_from([1, 1, 2, 4])))
            left -= gpus
            r = (
                running(f"r{len(runs)}")
                .queue("qa")
                .priority(draw(st.sampled_from([10, 100])))
                .started(float(draw(st.integers(0, 50))))
                .on(node, gpus=gpus)
            )
            if draw(st.booleans()):
                r.max_runtime(float(draw(st.sampled_from([60, 100, 200]))))
            runs.append(r)
    pending = []
    for i in range(draw(st.integers(1, 5))):
        j = (
            job(f"p{i}")
            .queue("qa")
            .replicas(
                draw(st.integers(1, 3)),
                gpu=draw(st.sampled_from([2, 4, 8])),
                max_per_node=draw(st.sampled_from([None, 1])),
            )
            .priority(draw(st.sampled_from([1000, 10000])))
            .submitted(float(i))
        )
        if draw(st.booleans()):
            j.topology("block", required=draw(st.booleans()))
        if draw(st.integers(0, 3)):
            j.preempts()
        pending.append(j)
    return snapshot(
        nodes=nodes,
        queues=[queue("qa").best_effort()],
        running=runs,
        pending=pending,
        now=50.0,
        topology_levels=LEVELS,
    )


@FAST
@given(crowded_snapshots(), st.sampled_from([Policy(), Policy(max_reservations=3)]))
def test_victims_counted_on_crowded_nodes_are_those_every_victim_tried_finds(
    snap: Snapshot, policy: Policy
) -> None:
    fast, plain = counted_and_tried(snap, policy)
    assert fast == plain


@FAST
@given(contended_snapshots(), st.sampled_from([p for p in POLICIES if p.preemption]))
def test_victims_counted_by_arithmetic_are_those_every_victim_tried_finds(
    snap: Snapshot, policy: Policy
) -> None:
    fast, plain = counted_and_tried(snap, policy)
    assert fast == plain


def counted_and_tried(
    snap: Snapshot, policy: Policy
) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """The cycle's outcome with victims counted by arithmetic, and with every victim tried."""
    fast = outcome(schedule(snap, policy))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core_module, "find_victims", plain_find_victims)
        plain = outcome(schedule(snap, policy))
    return fast, plain


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 8), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 5), st.integers(-8, 8)), max_size=12),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 4),
    st.sampled_from([None, 1, 2]),
    st.sets(st.integers(0, 5)),
)
def test_a_room_count_says_what_could_fit_says_after_the_same_changes(
    used: list[int],
    changes: list[tuple[int, int]],
    gpu: int,
    replicas: int,
    per_node: int | None,
    kept_at: set[int],
) -> None:
    nodes = cluster().nodes(len(used), gpus=8, prefix="n")
    busy = {f"n-{i}": u for i, u in enumerate(used)}
    overlay = CapacityOverlay.of(nodes.build(busy))
    gang = job("g").replicas(replicas, gpu=gpu, max_per_node=per_node).build()
    kept = [f"n-{i}" for i in sorted(kept_at) if i < len(used)]
    room = RoomCount(gang, overlay, kept)
    assert room.fits() == could_fit(gang, overlay, kept)
    for at, gpus in changes:
        if at >= len(used):
            continue
        node = f"n-{at}"
        free = overlay.free_gpus(node)
        gpus = max(-free, min(gpus, 8 - free))  # within what the node has
        room.change(node, gpus)
        if gpus > 0:
            overlay.give(node, tuple(range(8 - free - gpus, 8 - free)), 0, 0)
        elif gpus < 0:
            overlay.take(node, -gpus, 0, 0)
        assert room.fits() == could_fit(gang, overlay, kept)
