"""A scratch overlay of free node capacity, indexed for best-fit, whose changes can be undone.

Gang placement takes capacity replica by replica inside a transaction and commits only when the
whole gang fits; otherwise the transaction rolls back and leaves nothing behind.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from kiban.scheduler.snapshot import NodeView

NodeFilter = Callable[[NodeView], bool]


@dataclass(slots=True)
class _Taken:
    node: str
    gpu_ids: tuple[int, ...]
    cpu_millis: int
    memory: int


@dataclass(slots=True)
class Transaction:
    """Capacity taken so far in one attempt; ``commit`` keeps it, otherwise it is given back."""

    taken: list[_Taken] = field(default_factory=list)
    committed: bool = False

    def commit(self) -> None:
        self.committed = True


class CapacityOverlay:
    """Free GPUs, CPU and memory per schedulable node, bucketed by free GPU count.

    Each bucket keeps its node names sorted, so choices depend only on free capacity, never on
    the order of earlier takes and gives (a rolled-back transaction changes nothing).
    """

    def __init__(self, nodes: tuple[NodeView, ...]) -> None:
        self.nodes: dict[str, NodeView] = {n.name: n for n in nodes}
        self._gpu_ids: dict[str, list[int]] = {}
        self._cpu: dict[str, int] = {}
        self._memory: dict[str, int] = {}
        self._buckets: dict[int, list[str]] = {}
        for node in sorted(nodes, key=lambda n: n.name):
            if not node.schedulable:
                continue
            self._gpu_ids[node.name] = sorted(node.free_gpu_ids)
            self._cpu[node.name] = node.free_cpu_millis
            self._memory[node.name] = node.free_memory
            self._buckets.setdefault(len(node.free_gpu_ids), []).append(node.name)
        self._max_free = max(self._buckets, default=0)
        self._transaction: Transaction | None = None

    def free_gpus(self, node: str) -> int:
        return len(self._gpu_ids.get(node, ()))

    def total_free_gpus(self) -> int:
        return sum(len(ids) for ids in self._gpu_ids.values())

    def schedulable_nodes(self) -> list[str]:
        return list(self._gpu_ids)

    def best_fit(
        self, gpus: int, cpu_millis: int, memory: int, allow: NodeFilter | None = None
    ) -> str | None:
        """The node that fits with the fewest GPUs left over (first by name among equals)."""
        for free in range(gpus, self._max_free + 1):
            bucket = self._buckets.get(free)
            if not bucket:
                continue
            for name in bucket:
                if self._cpu[name] < cpu_millis or self._memory[name] < memory:
                    continue
                if allow is not None and not allow(self.nodes[name]):
                    continue
                return name
        return None

    def take(self, node: str, gpus: int, cpu_millis: int, memory: int) -> tuple[int, ...]:
        """Take capacity on ``node`` (lowest free GPU ids first) and return the GPU ids taken."""
        ids = self._gpu_ids[node]
        taken, rest = tuple(ids[:gpus]), ids[gpus:]
        self._move(node, len(ids), len(rest))
        self._gpu_ids[node] = rest
        self._cpu[node] -= cpu_millis
        self._memory[node] -= memory
        if self._transaction is not None:
            self._transaction.taken.append(_Taken(node, taken, cpu_millis, memory))
        return taken

    def give(self, node: str, gpu_ids: tuple[int, ...], cpu_millis: int, memory: int) -> None:
        """Return capacity to ``node``."""
        ids = self._gpu_ids[node]
        merged = sorted([*ids, *gpu_ids])
        self._move(node, len(ids), len(merged))
        self._gpu_ids[node] = merged
        self._cpu[node] += cpu_millis
        self._memory[node] += memory

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Group takes; unless committed, they are all given back on exit."""
        if self._transaction is not None:
            raise RuntimeError("transactions do not nest")
        tx = Transaction()
        self._transaction = tx
        try:
            yield tx
        finally:
            self._transaction = None
            if not tx.committed:
                for item in reversed(tx.taken):
                    self.give(item.node, item.gpu_ids, item.cpu_millis, item.memory)

    def _move(self, node: str, old_free: int, new_free: int) -> None:
        if old_free == new_free:
            return
        old = self._buckets[old_free]
        del old[bisect.bisect_left(old, node)]
        bisect.insort(self._buckets.setdefault(new_free, []), node)
        self._max_free = max(self._max_free, new_free)
