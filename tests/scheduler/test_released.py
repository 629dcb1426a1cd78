"""A reservation's trial placement by arithmetic (``ReleasedView``) lands the gang where best
fit on the overlay, with the same capacity given back, would; and it leaves the overlay alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiban.scheduler import backfill, released
from kiban.scheduler.capacity import CapacityOverlay
from kiban.scheduler.cycle import Cycle
from kiban.scheduler.node_match import NodeConstraint
from kiban.scheduler.placement import place_gang, place_in_topology
from kiban.scheduler.policy import Policy
from kiban.scheduler.released import (
    EndGroup,
    EndGroups,
    ReleasedView,
    RoomMemo,
    decidable,
    first_fit,
)
from kiban.scheduler.snapshot import NodeView, PendingJob, TaskDemand, TopologyRequest
from kiban.testing import cluster, job, queue, running, snapshot

LEVELS = ("block", "host")
CPU = 4000
MEMORY = 64


@st.composite
def nodes_and_releases(
    draw: st.DrawFn,
) -> tuple[list[NodeView], list[tuple[str, tuple[int, ...], int, int]]]:
    """Busy 8-GPU nodes in two blocks (some cordoned), whose CPU or memory may run out before
    their GPUs do, and the replicas of running jobs given back on them (some on nodes not
    scheduled)."""
    views: list[NodeView] = []
    releases: list[tuple[str, tuple[int, ...], int, int]] = []
    for i in range(draw(st.integers(1, 8))):
        name = f"n{i:02d}"
        busy = draw(st.integers(0, 8))
        cpu = draw(st.sampled_from([CPU, CPU, 2 * CPU, 8 * CPU]))
        memory = draw(st.sampled_from([MEMORY, 4 * MEMORY, 8 * MEMORY]))
        views.append(
            NodeView(
                name=name,
                gpus=8,
                cpu_millis=cpu,
                memory=memory,
                free_gpu_ids=tuple(range(busy, 8)),
                free_cpu_millis=draw(st.integers(0, cpu)),
                free_memory=draw(st.integers(0, memory)),
                labels={"zone": draw(st.sampled_from(["x", "y"]))},
                schedulable=draw(st.integers(0, 5)) > 0,
                topology=(draw(st.sampled_from(["b0", "b1"])), name),
            )
        )
        start = 0
        while start < busy:
            size = draw(st.integers(1, busy - start))
            if draw(st.booleans()):
                releases.append(
                    (
                        name,
                        tuple(range(start, start + size)),
                        size * CPU // 8,
                        draw(st.integers(0, 3)),
                    )
                )
            start += size
    return views, draw(st.permutations(releases))


@st.composite
def plain_jobs(draw: st.DrawFn) -> PendingJob:
    """Gangs of one task of many shapes, some asking for a topology domain or some nodes."""
    replicas = draw(st.integers(1, 6))
    level = draw(st.sampled_from([None, "block", "host", "rack"]))
    return PendingJob(
        id="j",
        queue="q",
        priority=0,
        submitted_at=0.0,
        tasks=(
            TaskDemand(
                "worker",
                replicas,
                draw(st.sampled_from([1, 2, 4, 8])),
                draw(st.sampled_from([0, CPU // 2, CPU])),
                draw(st.sampled_from([0, 1, MEMORY])),
                nodes=draw(st.sampled_from([None, NodeConstraint(selector=(("zone", "x"),))])),
                max_per_node=draw(st.sampled_from([None, None, 1, 2])),
            ),
        ),
        gang_size=draw(st.integers(1, replicas)),
        topology=None if level is None else TopologyRequest(level, draw(st.booleans())),
    )


@settings(max_examples=300, deadline=None)
@given(nodes_and_releases(), plain_jobs(), st.data())
def test_the_arithmetic_places_a_gang_where_best_fit_on_the_capacity_given_back_does(
    cluster_and_releases: tuple[list[NodeView], list[tuple[str, tuple[int, ...], int, int]]],
    pending: PendingJob,
    data: st.DataObject,
) -> None:
    views, releases = cluster_and_releases
    kept = data.draw(st.sets(st.sampled_from([v.name for v in views])))
    overlay = CapacityOverlay.of(views)
    task = decidable(pending)
    assert task is not None
    view = ReleasedView(pending, task, overlay, kept, LEVELS)
    for node, gpu_ids, cpu, memory in releases:
        view.give(node, len(gpu_ids), cpu, memory)
    state = overlay.state
    found = view.place()
    assert overlay.state == state and overlay.pristine  # the overlay was not touched

    with overlay.transaction():
        for node, gpu_ids, cpu, memory in releases:
            overlay.give(node, gpu_ids, cpu, memory)

        def allow(node: NodeView) -> bool:
            return node.name not in kept

        if pending.topology is None:
            attempt = place_gang(pending, overlay, allow)
        else:
            attempt = place_in_topology(pending, overlay, pending.topology, LEVELS, allow)
    expected = frozenset(p.node for p in attempt.placements) if attempt.fits else None
    assert found == expected


def test_gangs_of_several_tasks_preferences_or_extended_resources_are_placed_not_counted() -> None:
    worker = TaskDemand("worker", 2, 1, 0, 0)
    jobs = [
        PendingJob("a", "q", 0, 0.0, (worker, TaskDemand("ps", 1, 1, 0, 0)), 3),
        PendingJob("b", "q", 0, 0.0, (TaskDemand("w", 1, 1, 0, 0, extended=(("x", 1),)),), 1),
        PendingJob("c", "q", 0, 0.0, (TaskDemand("w", 1, 0, 0, 0),), 1),
    ]
    assert [decidable(j) for j in jobs] == [None, None, None]
    assert decidable(PendingJob("d", "q", 0, 0.0, (worker,), 2)) == worker


def test_a_plain_gangs_reservation_gives_nothing_back_to_the_overlay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = cluster().nodes(2, gpus=8)
    snap = snapshot(
        nodes=nodes,
        queues=[queue("q")],
        running=[
            running("r1").on("node-0", gpus=8).max_runtime(100.0).started(0.0),
            running("r2").on("node-1", gpus=8).max_runtime(200.0).started(0.0),
        ],
        pending=[job("big").replicas(2, gpu=8)],
        now=10.0,
    )
    cycle = Cycle.start(snap, Policy())

    def refuse(*args: object) -> None:
        raise AssertionError("a plain gang's reservation changed the overlay")

    monkeypatch.setattr(CapacityOverlay, "give", refuse)
    monkeypatch.setattr(CapacityOverlay, "take", refuse)
    reservation = backfill.reserve(cycle, snap.pending[0], "default")
    assert reservation is not None
    assert (reservation.at, reservation.nodes) == (200.0, frozenset({"node-0", "node-1"}))


def _groups(
    overlay: CapacityOverlay,
    releases: list[tuple[str, tuple[int, ...], int, int]],
    cuts: list[int],
) -> list[EndGroup]:
    """The releases on scheduled nodes as ends 1, 2, ... cut where ``cuts`` say (a node may
    free twice in one end, as ``end_groups`` never lists it but the arithmetic must allow)."""
    groups: list[EndGroup] = []
    freeing: list[tuple[str, int, int, int]] = []
    for i, (node, gpu_ids, cpu, memory) in enumerate(releases):
        if overlay.schedules(node):
            freeing.append((node, len(gpu_ids), cpu, memory))
        if i in cuts or i == len(releases) - 1:
            groups.append((float(len(groups) + 1), tuple(freeing)))
            freeing = []
    return groups


@settings(max_examples=300, deadline=None)
@given(nodes_and_releases(), st.lists(plain_jobs(), min_size=1, max_size=4), st.data())
def test_reservations_of_a_shape_sharing_their_ends_find_what_a_fresh_view_finds(
    cluster_and_releases: tuple[list[NodeView], list[tuple[str, tuple[int, ...], int, int]]],
    pendings: list[PendingJob],
    data: st.DataObject,
) -> None:
    """``first_fit`` (bisection over the ends, kept nodes skipped by their room) finds the end
    and nodes that giving every end back to a fresh ``ReleasedView`` finds, for several jobs of
    one shape and capacity in turn, whatever each keeps off and whichever asked first."""
    views, releases = cluster_and_releases
    overlay = CapacityOverlay.of(views)
    names = [v.name for v in views]
    cuts = data.draw(st.lists(st.integers(0, max(len(releases) - 1, 0)), max_size=6))
    groups = _groups(overlay, releases, cuts)
    ends = EndGroups.made(groups, overlay)
    memo: RoomMemo = {}
    task = decidable(pendings[0])
    assert task is not None
    for other in pendings:
        pending = other
        if data.draw(st.booleans()):  # the same shape, another gang size and request
            pending = PendingJob(
                "j",
                "q",
                0,
                0.0,
                (task,),
                data.draw(st.integers(1, task.replicas + 1)),
                other.topology,
            )
        own = decidable(pending)
        assert own is not None
        kept = data.draw(st.lists(st.sampled_from(names), unique=True))
        expected = ReleasedView(pending, own, overlay, kept, LEVELS).first_fit(groups)
        assert first_fit(pending, own, overlay, kept, LEVELS, memo, ends) == expected
    assert overlay.pristine


def test_a_cycles_reservations_of_one_shape_give_each_end_back_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reservation of a shape on the same capacity as an earlier one reuses what that one
    worked out: no node's room is counted again for ends already given back."""
    nodes = cluster().nodes(4, gpus=8)
    snap = snapshot(
        nodes=nodes,
        queues=[queue("q")],
        running=[
            running(f"r{i}").on(f"node-{i}", gpus=8).max_runtime(100.0 * (i + 1)).started(0.0)
            for i in range(4)
        ],
        pending=[job("a").replicas(5, gpu=8), job("b").replicas(2, gpu=8)],
        now=10.0,
    )
    cycle = Cycle.start(snap, Policy())
    counted: list[int] = []
    room_of = released.room_of

    def counting(task: TaskDemand, free: int, cpu: int, memory: int) -> int:
        counted.append(free)
        return room_of(task, free, cpu, memory)

    monkeypatch.setattr(released, "room_of", counting)
    # five replicas of a node each never fit four nodes: every end is given back
    assert backfill.reserve(cycle, snap.pending[0], "default") is None
    before = len(counted)
    second = backfill.reserve(cycle, snap.pending[1], "default")
    assert second is not None
    assert (second.at, second.nodes) == (200.0, frozenset({"node-0", "node-1"}))
    assert len(counted) == before
