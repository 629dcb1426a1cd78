"""The core's fast paths decide exactly as the plain paths they stand for, on random contended
clusters: each fast path is swapped for its plain version and the decisions compared."""

from __future__ import annotations

import pytest
from busy_nodes import busy_runs
from hypothesis import given, settings
from hypothesis import strategies as st

from kiban.scheduler import Decisions, Snapshot, preemption, schedule
from kiban.scheduler import core as core_module
from kiban.scheduler.capacity import CapacityOverlay
from kiban.scheduler.cycle import Cycle, Reservation
from kiban.scheduler.placement import could_fit
from kiban.scheduler.policy import Policy
from kiban.scheduler.snapshot import PendingJob
from kiban.testing import cluster, job, queue, snapshot

FAST = settings(max_examples=80, deadline=None)
LEVELS = ("block", "host")


@st.composite
def contended_snapshots(draw: st.DrawFn) -> Snapshot:
    """Two blocks of 8-GPU nodes, mostly busy with jobs ending at a few shared times (some
    never), and gangs of many shapes waiting in best-effort and strict queues."""
    nodes = cluster()
    names: list[str] = []
    for block in ("b0", "b1"):
        count = draw(st.integers(1, 5))
        nodes.nodes(count, gpus=8, prefix=f"{block}n", topology=(block,))
        names += [f"{block}n-{i}" for i in range(count)]
    free = dict.fromkeys(names, 8)
    runs = busy_runs(
        draw,
        free,
        draw(st.integers(0, 3 * len(names))),
        queues=("qa", "qb"),
        limits=(60, 100, 100, 200, 400),
    )
    pending = []
    for i in range(draw(st.integers(1, 8))):
        replicas = draw(st.integers(1, 4))
        j = (
            job(f"p{i}")
            .queue(draw(st.sampled_from(["qa", "qb"])))
            .replicas(
                replicas,
                gpu=draw(st.sampled_from([1, 2, 4, 8])),
                max_per_node=draw(st.sampled_from([None, None, 1, 2])),
            )
            .priority(draw(st.sampled_from([100, 1000, 10000])))
            .submitted(float(draw(st.integers(0, 60))))
        )
        if draw(st.booleans()):
            j.max_runtime(float(draw(st.sampled_from([30, 80, 150, 500]))))
        topology = draw(st.sampled_from([None, "preferred", "required"]))
        if topology is not None:
            j.topology("block", required=topology == "required")
        if draw(st.booleans()):
            j.preempts()
        pending.append(j)
    return snapshot(
        nodes=nodes,
        queues=[queue("qa").best_effort(), queue("qb")],
        running=runs,
        pending=pending,
        now=50.0,
        topology_levels=LEVELS,
    )


def plain_reserve(cycle: Cycle, job: PendingJob, flavor: str) -> Reservation | None:
    """Backfill's reservation as plainly as it reads: give back each end's GPUs in turn and try
    the gang's placement after every end, with no capacity arithmetic to spare the tries."""
    if cycle.reservation_count >= cycle.policy.max_reservations:
        return None
    now = cycle.snapshot.now
    ending = sorted(
        (now if r.id in cycle.victims else r.expected_end, r.id, r)
        for r in cycle.running_on(flavor)
        if r.expected_end is not None or r.id in cycle.victims
    )
    overlay = cycle.overlays[flavor]
    allow = cycle.reservation_filter(job.id)
    found: Reservation | None = None
    with overlay.transaction():
        for k, (end, _id, r) in enumerate(ending):
            assert end is not None
            for replica in r.replicas:
                overlay.give(replica.node, replica.gpu_ids, replica.cpu_millis, replica.memory)
            if k + 1 < len(ending) and ending[k + 1][0] == end:
                continue
            attempt = cycle.try_place(job, flavor, allow)
            if attempt.fits:
                found = Reservation(
                    job.id, flavor, max(end, now), frozenset(p.node for p in attempt.placements)
                )
                break
    if found is not None:
        cycle.add_reservation(found)
    return found


def outcome(decisions: Decisions) -> tuple[object, ...]:
    """Everything a cycle decides: admissions and their placements, victims, every wait."""
    return (decisions.admitted, decisions.preempted, tuple(decisions.waiting), decisions.more)


POLICIES = [Policy(), Policy(preemption=False), Policy(max_reservations=2)]


@FAST
@given(contended_snapshots(), st.sampled_from(POLICIES))
def test_reservations_found_by_capacity_arithmetic_are_those_every_end_tried_finds(
    snap: Snapshot, policy: Policy
) -> None:
    fast = outcome(schedule(snap, policy))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core_module, "reserve", plain_reserve)
        plain = outcome(schedule(snap, policy))
    assert fast == plain


def could_fit_anywhere(job: PendingJob, overlay: CapacityOverlay, excluded: object = ()) -> bool:
    """The victim search's capacity check as it was: the free GPUs of every node counted,
    those kept for other jobs' reservations too."""
    return could_fit(job, overlay)


@FAST
@given(contended_snapshots(), st.sampled_from(POLICIES[:1] + POLICIES[2:]))
def test_victim_searches_off_reserved_nodes_choose_the_victims_every_node_counted_chooses(
    snap: Snapshot, policy: Policy
) -> None:
    fast = outcome(schedule(snap, policy))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preemption, "could_fit", could_fit_anywhere)
        plain = outcome(schedule(snap, policy))
    assert fast == plain
