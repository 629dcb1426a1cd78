"""Best fit inside a topology domain through the free-GPU buckets (``CapacityOverlay.best_fit``
given the domain as a set) picks the node a scan of every node of the domain picks, and the
cycles built on it decide as cycles that scan."""

from __future__ import annotations

from collections.abc import Collection

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_paths import POLICIES, contended_snapshots, outcome

from kiban.scheduler import Snapshot, schedule
from kiban.scheduler.capacity import CapacityOverlay, NodeFilter
from kiban.scheduler.node_match import NodePreference
from kiban.scheduler.policy import Policy
from kiban.scheduler.snapshot import NodeView
from kiban.testing import cluster

FAST = settings(max_examples=80, deadline=None)
_best_fit = CapacityOverlay.best_fit


def scanning_best_fit(
    overlay: CapacityOverlay,
    gpus: int,
    cpu_millis: int,
    memory: int,
    allow: NodeFilter | None = None,
    within: Collection[str] | None = None,
    prefers: NodePreference | None = None,
) -> str | None:
    """Best fit in a domain as it reads: every node of the domain visited, the one with the
    fewest GPUs left over (then the first by name) kept."""
    if within is None or prefers is not None:
        return _best_fit(overlay, gpus, cpu_millis, memory, allow, within, prefers)
    fitting = [
        (overlay.free_gpus(name), name)
        for name in within
        if overlay.fits(name, gpus, cpu_millis, memory)
        and (allow is None or allow(overlay.nodes[name]))
    ]
    return min(fitting)[1] if fitting else None


@st.composite
def busy_domains(draw: st.DrawFn) -> tuple[CapacityOverlay, list[tuple[int, int]]]:
    """Three domains of up to 12 nodes of 8 GPUs (two levels: rack and block), most GPUs
    taken; nodes named so that name order and domain order differ."""
    nodes = cluster()
    for rack in ("r0", "r1", "r2"):
        for block in ("b0", "b1"):
            count = draw(st.integers(0 if nodes.build() else 1, 6))
            nodes.nodes(count, gpus=8, prefix=f"{block}{rack}", topology=(rack, block))
    views = nodes.build()
    names = [v.name for v in views]
    used = {name: draw(st.integers(0, 8)) for name in names}
    overlay = CapacityOverlay.of(nodes.build(used))
    asks = draw(st.lists(st.tuples(st.sampled_from([0, 1, 2, 4, 8]), st.integers(0, 1))))
    return overlay, asks


@FAST
@given(busy_domains(), st.integers(0, 1), st.booleans())
def test_best_fit_in_a_domain_picks_the_node_a_scan_of_the_domain_picks(
    drawn: tuple[CapacityOverlay, list[tuple[int, int]]], level: int, filtered: bool
) -> None:
    overlay, asks = drawn

    def allow(node: NodeView) -> bool:  # some nodes refused, as a reservation or spread does
        return not filtered or not node.name.endswith("-1")

    for domain in overlay.domains(level):
        members = overlay.domain_members(level, domain)
        assert sorted(members) == overlay.domain_nodes(level, domain)
        for gpus, take in asks:
            fast = overlay.best_fit(gpus, 0, 0, allow, within=members)
            assert fast == scanning_best_fit(overlay, gpus, 0, 0, allow, within=members)
            if fast is not None and take:  # the overlay changes between asks
                overlay.take(fast, gpus, 0, 0)


def test_a_small_free_bucket_is_searched_instead_of_a_large_domain() -> None:
    """Of 40 nodes of one domain, two have 8 GPUs free: the one of the domain is found, first by
    name among equals, and one outside the domain is never chosen."""
    nodes = (
        cluster()
        .nodes(40, gpus=8, prefix="in", topology=("rack",))
        .nodes(2, gpus=8, prefix="a-out", topology=("other",))
    )
    used = {f"in-{i}": 8 for i in range(40)} | {"in-7": 0, "in-30": 0, "in-3": 4}
    overlay = CapacityOverlay.of(nodes.build(used))
    members = overlay.domain_members(0, ("rack",))
    assert overlay.best_fit(8, 0, 0, within=members) == "in-30"  # "in-30" < "in-7" by name
    assert overlay.best_fit(3, 0, 0, within=members) == "in-3"
    assert overlay.best_fit(1, 0, 0, lambda n: n.name != "in-3", within=members) == "in-30"


@FAST
@given(contended_snapshots(), st.sampled_from(POLICIES))
def test_cycles_with_best_fit_through_the_buckets_decide_as_cycles_that_scan_the_domain(
    snap: Snapshot, policy: Policy
) -> None:
    fast = outcome(schedule(snap, policy))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CapacityOverlay, "best_fit", scanning_best_fit)
        plain = outcome(schedule(snap, policy))
    assert fast == plain
