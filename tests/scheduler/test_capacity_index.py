"""The capacity index kept across cycles equals one built afresh, whatever changed between."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kiban.scheduler.capacity_index import CapacityCache, CapacityIndex
from kiban.scheduler.snapshot import NodeView
from kiban.testing import cluster


def contents(index: CapacityIndex) -> dict[str, Any]:
    """Everything the index holds, with empty entries dropped (they hold nothing)."""
    return {
        "nodes": dict(sorted(index.nodes.items())),
        "gpu_ids": dict(sorted(index.gpu_ids.items())),
        "cpu": dict(sorted(index.cpu.items())),
        "memory": dict(sorted(index.memory.items())),
        "buckets": {k: v for k, v in sorted(index.buckets.items()) if v},
        "total_free": index.total_free,
        "max_free": index.max_free,
        "domain_free": [dict(sorted(d.items())) for d in index.domain_free if d],
        "domain_size": [dict(sorted(d.items())) for d in index.domain_size if d],
        "domain_nodes": [dict(sorted(d.items())) for d in index.domain_nodes if d],
        "shapes": {k: v for k, v in index.shapes.items() if v},
    }


def starting_nodes() -> list[NodeView]:
    return list(
        cluster()
        .nodes(3, gpus=8, prefix="h", flavor="h100", topology=("i0", "b0"))
        .nodes(3, gpus=8, prefix="h", flavor="h100", topology=("i0", "b1"))
        .nodes(2, gpus=4, prefix="a", flavor="a100", topology=("i1", "b2"))
        .build()
    )


change = st.tuples(
    st.sampled_from(["take", "give", "cordon", "uncordon", "relabel", "remove", "add"]),
    st.integers(0, 20),
    st.integers(0, 8),
)


def apply(nodes: list[NodeView], what: str, which: int, amount: int) -> list[NodeView]:
    if what == "add":
        name = f"new-{which}"
        if any(n.name == name for n in nodes):
            return nodes
        topology = ("i1", f"b{which % 3}", name)
        fresh = NodeView(name, 8, 64_000, 2**36, tuple(range(8)), 64_000, 2**36, topology=topology)
        return [*nodes, fresh]
    if not nodes:
        return nodes
    i = which % len(nodes)
    node = nodes[i]
    if what == "remove":
        return nodes[:i] + nodes[i + 1 :]
    if what == "take":
        new = dataclasses.replace(
            node,
            free_gpu_ids=node.free_gpu_ids[amount:],
            free_cpu_millis=node.free_cpu_millis - 100 * amount,
        )
    elif what == "give":
        ids = sorted(set(node.free_gpu_ids) | set(range(min(amount, node.gpus))))
        new = dataclasses.replace(node, free_gpu_ids=tuple(ids))
    elif what == "cordon":
        new = dataclasses.replace(node, schedulable=False, unschedulable_reason="cordoned")
    elif what == "uncordon":
        new = dataclasses.replace(node, schedulable=True, unschedulable_reason="")
    else:
        new = dataclasses.replace(node, flavor="a100" if node.flavor == "h100" else "h100")
    return [*nodes[:i], new, *nodes[i + 1 :]]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(change, max_size=6), min_size=1, max_size=8))
def test_a_kept_index_equals_a_fresh_one(rounds: list[list[tuple[str, int, int]]]) -> None:
    cache = CapacityCache()
    nodes = starting_nodes()
    for changes in rounds:
        for what, which, amount in changes:
            nodes = apply(nodes, what, which, amount)
        kept = cache.indexes(nodes)
        for flavor in ("h100", "a100"):
            fresh = CapacityIndex(n for n in nodes if n.flavor == flavor)
            assert contents(kept.get(flavor) or CapacityIndex()) == contents(fresh)


def test_unchanged_views_are_not_indexed_again() -> None:
    cache = CapacityCache()
    nodes = starting_nodes()
    first = cache.indexes(nodes)["h100"]
    taken = dataclasses.replace(nodes[0], free_gpu_ids=nodes[0].free_gpu_ids[3:])
    again = cache.indexes([taken, *nodes[1:]])["h100"]
    assert again is first  # the same index, updated in place for the one node that changed
    assert again.gpu_ids[taken.name] == [3, 4, 5, 6, 7]
    assert again.total_free == 6 * 8 - 3
