"""The capacity overlay: best fit, GPU ids, and transactions that leave nothing behind."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiban.scheduler.capacity import CapacityOverlay
from kiban.testing import cluster

GIB = 2**30


def overlay(running: dict[str, int | list[int]] | None = None) -> CapacityOverlay:
    nodes = (
        cluster()
        .node("a", gpus=2, cpu_millis=8000, memory=64 * GIB)
        .node("b", gpus=4, cpu_millis=16_000, memory=128 * GIB)
        .node("c", gpus=8, cpu_millis=32_000, memory=256 * GIB)
        .node("d", gpus=4, cpu_millis=16_000, memory=128 * GIB)
        .node("off", gpus=8)
        .cordoned("off")
    )
    return CapacityOverlay.of(nodes.build(running_gpus=running))


def observe(o: CapacityOverlay) -> dict[str, Any]:
    """Everything a caller can learn from the overlay, plus its internals."""
    answers = {
        (g, cpu, mem): o.best_fit(g, cpu, mem)
        for g in range(0, 10)
        for cpu in (0, 8000, 20_000)
        for mem in (0, 100 * GIB)
    }
    return {
        "free": {n: o.free_gpus(n) for n in o.nodes},
        "total": o.total_free_gpus(),
        "schedulable": o.schedulable_nodes(),
        "best_fit": answers,
        "internals": copy.deepcopy(
            (o._gpu_ids, o._cpu, o._memory, {k: v for k, v in o._buckets.items() if v})
        ),
    }


def test_unschedulable_nodes_are_left_out() -> None:
    o = overlay()
    assert o.schedulable_nodes() == ["a", "b", "c", "d"]
    assert o.total_free_gpus() == 18
    assert o.free_gpus("off") == 0


@pytest.mark.parametrize(
    ("gpus", "cpu", "memory", "node"),
    [
        (1, 0, 0, "a"),  # fewest GPUs left over
        (2, 0, 0, "a"),
        (3, 0, 0, "b"),  # b and d tie: first by name
        (4, 0, 0, "b"),
        (5, 0, 0, "c"),
        (9, 0, 0, None),
        (2, 10_000, 0, "b"),  # a has too little CPU
        (2, 0, 200 * GIB, "c"),  # only c has the memory
        (0, 0, 0, "a"),
    ],
)
def test_best_fit(gpus: int, cpu: int, memory: int, node: str | None) -> None:
    assert overlay().best_fit(gpus, cpu, memory) == node


def test_best_fit_filter() -> None:
    assert overlay().best_fit(1, 0, 0, allow=lambda n: n.gpus >= 8) == "c"


def test_take_hands_out_lowest_free_ids_and_give_returns_them() -> None:
    o = overlay(running={"b": [0, 2]})
    assert o.take("b", 1, 1000, GIB) == (1,)
    assert o.free_gpus("b") == 1
    assert o.take("b", 1, 1000, GIB) == (3,)
    assert o.best_fit(1, 0, 0) == "a"
    o.give("b", (3, 1), 2000, 2 * GIB)
    assert o.take("b", 2, 0, 0) == (1, 3)


def test_transaction_rolls_back_completely() -> None:
    o = overlay(running={"c": 3})
    before = observe(o)
    with o.transaction():
        o.take("d", 4, 16_000, 128 * GIB)
        o.take("a", 1, 500, GIB)
        o.take("c", 2, 0, 0)
        o.take("a", 1, 500, GIB)
        assert observe(o) != before
    assert observe(o) == before


def test_transaction_rolls_back_when_an_error_escapes() -> None:
    o = overlay()
    before = observe(o)
    with pytest.raises(KeyError), o.transaction():
        o.take("b", 4, 0, 0)
        o.take("no-such-node", 1, 0, 0)
    assert observe(o) == before


def test_committed_transaction_keeps_its_takes() -> None:
    o = overlay()
    with o.transaction() as tx:
        ids = o.take("c", 3, 1000, GIB)
        tx.commit()
    assert ids == (0, 1, 2)
    assert o.free_gpus("c") == 5
    assert o.total_free_gpus() == 15


def test_choices_after_a_rollback_are_those_before_it() -> None:
    """A rolled-back gang attempt must not change where the next job goes."""
    o = overlay()
    with o.transaction():
        for name in ("b", "d"):
            o.take(name, 4, 0, 0)
    assert o.best_fit(3, 0, 0) == "b"
    with o.transaction():
        o.take("d", 1, 0, 0)
        o.take("b", 1, 0, 0)
    assert o.best_fit(3, 0, 0) == "b"


def test_a_committed_inner_transaction_is_undone_with_the_outer_one() -> None:
    o = overlay()
    before = {n: o.free_gpus(n) for n in o.schedulable_nodes()}
    with o.transaction():
        o.give("a", (), 0, 0)
        first = o.best_fit(1, 0, 0)
        assert first is not None
        o.take(first, 1, 0, 0)
        with o.transaction() as inner:
            o.take(first, 1, 0, 0)
            inner.commit()
        after_inner = o.free_gpus(first)
    assert after_inner == before[first] - 2
    assert {n: o.free_gpus(n) for n in o.schedulable_nodes()} == before


def test_capacity_given_back_in_a_what_if_is_taken_again_on_exit() -> None:
    o = overlay()
    name = o.best_fit(1, 0, 0)
    assert name is not None
    ids = o.take(name, 1, 0, 0)
    free = o.free_gpus(name)
    with o.transaction():
        o.give(name, ids, 0, 0)
        assert o.free_gpus(name) == free + 1
    assert o.free_gpus(name) == free
    assert o.total_free_gpus() == sum(o.free_gpus(n) for n in o.schedulable_nodes())


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 8), st.booleans()),
        max_size=12,
    )
)
def test_any_sequence_of_takes_rolls_back(takes: list[tuple[str, int, bool]]) -> None:
    o = overlay(running={"b": [1], "c": 4})
    before = observe(o)
    with o.transaction():
        for name, gpus, small in takes:
            gpus = min(gpus, o.free_gpus(name))
            o.take(name, gpus, 100 if small else 0, GIB if small else 0)
    assert observe(o) == before


def test_replica_slots_count_what_free_gpus_could_hold() -> None:
    o = overlay(running={"c": 3})  # free: a 2, b 4, c 5, d 4 (off is cordoned)
    assert [o.replica_slots(g) for g in (1, 2, 4, 5, 8)] == [15, 7, 3, 1, 0]
    with o.transaction():
        o.take("b", 4, 0, 0)
        assert o.replica_slots(4) == 2
    assert o.replica_slots(4) == 3
