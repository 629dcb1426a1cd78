"""One node's view changed between cycles, for the memo parity tests (``test_known_failures``,
``test_shape_failures``): GPUs taken or freed, cordoned or back, labels changed."""

from __future__ import annotations

import dataclasses

from kiban.scheduler.snapshot import NodeView

CHANGES = ("take", "give", "cordon", "uncordon", "relabel")


def changed(nodes: list[NodeView], what: str, which: int, amount: int) -> list[NodeView]:
    """``nodes`` with node ``which`` (modulo their count) changed by ``what`` (of ``CHANGES``)."""
    i = which % len(nodes)
    node = nodes[i]
    if what == "take":
        new = dataclasses.replace(node, free_gpu_ids=node.free_gpu_ids[amount:])
    elif what == "give":
        ids = sorted(set(node.free_gpu_ids) | set(range(min(amount, node.gpus))))
        new = dataclasses.replace(node, free_gpu_ids=tuple(ids))
    elif what == "cordon":
        new = dataclasses.replace(node, schedulable=False, unschedulable_reason="cordoned")
    elif what == "uncordon":
        new = dataclasses.replace(node, schedulable=True, unschedulable_reason="")
    else:  # relabel: the H100 label moves on or off the node, its capacity unchanged
        labels = {} if node.labels.get("gpu.product") == "H100" else {"gpu.product": "H100"}
        new = dataclasses.replace(node, labels=labels)
    return [*nodes[:i], new, *nodes[i + 1 :]]
