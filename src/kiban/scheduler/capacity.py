"""A scratch overlay of free node capacity, indexed for best-fit, whose changes can be undone.

Gang placement takes capacity replica by replica inside a transaction and commits only when the
whole gang fits; otherwise the transaction rolls back and leaves nothing behind. "What if"
questions (a reservation, a preemption) give capacity back inside a transaction the same way.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterator, KeysView
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager

from kiban.scheduler.capacity_index import CapacityIndex
from kiban.scheduler.node_match import NodeConstraint, NodePreference
from kiban.scheduler.snapshot import NO_EXTENDED, Extended, NodeView
from kiban.scheduler.what_if import Transaction, nested

NodeFilter = Callable[[NodeView], bool]

NO_SPREAD_LIMIT = 1_000_000
"""The replicas per node of a task that does not limit them, in room counts."""


_Change = tuple[bool, str, tuple[int, ...], int, int, Extended]
"""A change logged for undo: taken (True: capacity was taken; False: given back), the node, its
GPU ids, CPU, memory, extended resources. A tuple: placements log one per replica tried."""


class CapacityOverlay:
    """Free GPUs, CPU and memory per schedulable node, bucketed by free GPU count.

    A cycle's scratch copy of a ``CapacityIndex``: changes made here never reach the index.
    Each bucket keeps its node names sorted, so choices depend only on free capacity, never on
    the order of earlier takes and gives (a rolled-back transaction changes nothing). Free GPUs
    are also summed per topology domain (every prefix of a node's topology path).
    """

    def __init__(self, index: CapacityIndex) -> None:
        self.index = index
        self.nodes: dict[str, NodeView] = index.nodes
        self.levels = index.levels
        self._gpu_ids = dict(index.gpu_ids)  # lists are replaced, never changed in place
        self._cpu = dict(index.cpu)
        self._memory = dict(index.memory)
        self._extended = dict(index.extended)  # a node's dict is replaced, never changed
        self._buckets = dict(index.buckets)  # a bucket's list is copied before its first change
        self._own_buckets: set[int] = set()
        self._total_free = index.total_free
        self._max_free = index.max_free
        self._domain_free = [dict(level) for level in index.domain_free]
        self._transactions: list[Transaction[_Change]] = []
        self._undoing = False
        self._live_changes = 0  # takes and gives made and not undone: 0 while it equals its index
        # Which capacity it holds (``state``): 0 for its index's; a new number at every take or
        # give, the number it had back when a transaction is undone.
        self._state = 0
        self._states = 0
        self._slot_counts: dict[tuple[int, int, int], int] = {}  # by state, GPUs, spread
        self._constrained_fits: dict[
            tuple[int, int, int, NodeConstraint, Extended], tuple[bool, int]
        ] = {}

    @classmethod
    def of(cls, nodes: Collection[NodeView]) -> CapacityOverlay:
        """An overlay of these nodes, indexed afresh."""
        return cls(CapacityIndex(nodes))

    def free_gpus(self, node: str) -> int:
        return len(self._gpu_ids.get(node, ()))

    def free_cpu(self, node: str) -> int:
        """Free CPU millis of a schedulable node."""
        return self._cpu[node]

    def free_memory(self, node: str) -> int:
        """Free memory of a schedulable node."""
        return self._memory[node]

    def schedules(self, node: str) -> bool:
        """Whether the overlay schedules the node (capacity given to others is ignored)."""
        return node in self._gpu_ids

    def total_free_gpus(self) -> int:
        return self._total_free

    @property
    def pristine(self) -> bool:
        """Whether the overlay holds its index's capacity unchanged: no take or give made that
        was not undone (one made and reversed by hand counts as a change)."""
        return self._live_changes == 0

    def judging_mark(self) -> tuple[int, bool, int]:
        """``state``, ``pristine`` and how many failures its index keeps across cycles: what
        ``Cycle.judging_state`` reads of each flavor, read at once."""
        return (self._state, self._live_changes == 0, len(self.index.failures))

    @property
    def state(self) -> int:
        """A number for the free capacity the overlay holds now, within its cycle: equal numbers,
        equal capacity (0: its index's). Undoing a transaction gives back the number it began
        with; any other take or give, a number not seen before, so a failed placement's answer
        can be kept for as long as the number stays (``Cycle.failed_placement``)."""
        return self._state

    def schedulable(self) -> KeysView[str]:
        """The schedulable nodes' names, in no particular order (a live view)."""
        return self._gpu_ids.keys()

    def schedulable_nodes(self) -> list[str]:
        return sorted(self._gpu_ids)

    def schedulable_count(self) -> int:
        return len(self._gpu_ids)

    def replica_slots(
        self, gpus: int, per_node: int | None = None, excluded: Collection[str] = ()
    ) -> int:
        """How many replicas of ``gpus`` GPUs the free GPUs could hold, at most ``per_node`` on
        a node (None: no limit), CPU and memory aside, off the ``excluded`` nodes: a cheap
        upper bound that spares a gang placement doomed to fail."""
        cap = NO_SPREAD_LIMIT if per_node is None else per_node
        if gpus <= 0:
            off = sum(1 for node in excluded if node in self._gpu_ids)
            return (sum(len(bucket) for bucket in self._buckets.values()) - off) * cap
        key = (self._state, gpus, cap)
        slots = self._slot_counts.get(key)
        if slots is None:  # counted once per capacity: victim searches and reservations ask
            slots = self._slot_counts[key] = sum(
                len(bucket) * min(free // gpus, cap)
                for free, bucket in self._buckets.items()
                if free >= gpus
            )
        for node in excluded:
            slots -= min(len(self._gpu_ids.get(node, ())) // gpus, cap)
        return slots

    def nodes_with_room(
        self,
        gpus: int,
        cpu_millis: int,
        memory: int,
        allow: NodeFilter | None = None,
        extended: Extended = NO_EXTENDED,
    ) -> int:
        """How many schedulable nodes (of those ``allow`` admits) could take one replica of this
        size now: visits the nodes with enough free GPUs, so only for explaining a failure."""
        count = 0
        for free in range(max(gpus, 0), self._max_free + 1):
            for name in self._buckets.get(free, ()):
                if self._cpu[name] < cpu_millis or self._memory[name] < memory:
                    continue
                if not self.extended_fits(name, extended):
                    continue
                if allow is not None and not allow(self.nodes[name]):
                    continue
                count += 1
        return count

    def free_extended(self, node: str, name: str) -> int:
        """Free units of an extended resource on a schedulable node (0: it advertises none)."""
        return self._extended.get(node, {}).get(name, 0)

    def extended_fits(self, node: str, extended: Extended) -> bool:
        """Whether the node has ``extended`` free (always, when nothing is asked)."""
        if not extended:
            return True
        free = self._extended.get(node)
        if free is None:
            return False
        return all(free.get(name, 0) >= amount for name, amount in extended)

    def extended_filter(self, extended: Extended, allow: NodeFilter | None) -> NodeFilter | None:
        """``allow``, narrowed to the nodes with ``extended`` free now (``allow`` itself when
        nothing is asked: the common job's placement takes no extra step)."""
        if not extended:
            return allow
        fits = self.extended_fits

        def admits(node: NodeView) -> bool:
            return fits(node.name, extended) and (allow is None or allow(node))

        return admits

    def total_free_extended(self, name: str) -> int:
        """Free units of an extended resource on all schedulable nodes together."""
        return sum(free.get(name, 0) for free in self._extended.values())

    def domains(self, level: int) -> dict[tuple[str, ...], int]:
        """Free GPUs of each domain of a topology level (0 = outermost)."""
        return self._domain_free[level]

    def domain_nodes(self, level: int, domain: tuple[str, ...]) -> list[str]:
        """The schedulable nodes of one domain, by name."""
        return self.index.domain_nodes[level].get(domain, [])

    def domain_members(self, level: int, domain: tuple[str, ...]) -> frozenset[str]:
        """The schedulable nodes of one domain, as a set (``best_fit``'s ``within``)."""
        return self.index.domain_members(level, domain)

    def fits(self, node: str, gpus: int, cpu_millis: int, memory: int) -> bool:
        return (
            len(self._gpu_ids[node]) >= gpus
            and self._cpu[node] >= cpu_millis
            and self._memory[node] >= memory
        )

    def best_fit(
        self,
        gpus: int,
        cpu_millis: int,
        memory: int,
        allow: NodeFilter | None = None,
        within: Collection[str] | None = None,
        prefers: NodePreference | None = None,
    ) -> str | None:
        """The node that fits with the fewest GPUs left over (first by name among equals).

        ``within`` limits the choice to those nodes (a topology domain); ``allow`` filters;
        ``prefers`` puts the nodes it scores higher first (every fitting node is then visited).
        A domain given as a set is searched through the free-GPU buckets when fewer nodes have
        room for ``gpus`` than the domain has nodes: the same node, fewer visited.
        """
        if prefers is not None:
            return self._preferred_fit(gpus, cpu_millis, memory, allow, within, prefers)
        if within is not None and not (
            isinstance(within, AbstractSet) and self._with_gpus(gpus) < len(within)
        ):
            best: tuple[int, str] | None = None
            for name in within:
                if not self.fits(name, gpus, cpu_millis, memory):
                    continue
                if allow is not None and not allow(self.nodes[name]):
                    continue
                key = (len(self._gpu_ids[name]), name)
                if best is None or key < best:
                    best = key
            return None if best is None else best[1]
        for free in range(gpus, self._max_free + 1):
            bucket = self._buckets.get(free)
            if not bucket:
                continue
            for name in bucket:
                if within is not None and name not in within:
                    continue
                if self._cpu[name] < cpu_millis or self._memory[name] < memory:
                    continue
                if allow is not None and not allow(self.nodes[name]):
                    continue
                return name
        return None

    def _with_gpus(self, gpus: int) -> int:
        """How many schedulable nodes have at least ``gpus`` GPUs free."""
        return sum(len(bucket) for free, bucket in self._buckets.items() if free >= gpus)

    def _preferred_fit(
        self,
        gpus: int,
        cpu_millis: int,
        memory: int,
        allow: NodeFilter | None,
        within: Collection[str] | None,
        prefers: NodePreference,
    ) -> str | None:
        candidates: Iterator[str] = (
            iter(within)
            if within is not None
            else (
                name
                for free in range(gpus, self._max_free + 1)
                for name in self._buckets.get(free, ())
            )
        )
        best: tuple[int, int, str] | None = None
        for name in candidates:
            if not self.fits(name, gpus, cpu_millis, memory):
                continue
            node = self.nodes[name]
            if allow is not None and not allow(node):
                continue
            key = (-prefers.score(name, node.labels), len(self._gpu_ids[name]), name)
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    def constrained_fit(
        self,
        gpus: int,
        cpu_millis: int,
        memory: int,
        nodes: NodeConstraint,
        extended: Extended = NO_EXTENDED,
    ) -> tuple[bool, int]:
        """Whether an idle schedulable node the constraint admits could hold a replica of this
        size, and how many unschedulable ones could (visits every node once per cycle)."""
        key = (gpus, cpu_millis, memory, nodes, extended)
        known = self._constrained_fits.get(key)
        if known is None:
            fits, blocked = False, 0
            for node in self.nodes.values():
                if node.gpus < gpus or node.cpu_millis < cpu_millis or node.memory < memory:
                    continue
                if extended and any(node.extended.get(n, 0) < a for n, a in extended):
                    continue
                if not nodes.allows(node.name, node.labels):
                    continue
                if node.schedulable:
                    fits = True
                else:
                    blocked += 1
            known = self._constrained_fits[key] = (fits, blocked)
        return known

    def take(
        self,
        node: str,
        gpus: int,
        cpu_millis: int,
        memory: int,
        extended: Extended = NO_EXTENDED,
    ) -> tuple[int, ...]:
        """Take capacity on ``node`` (lowest free GPU ids first) and return the GPU ids taken."""
        taken = tuple(self._gpu_ids[node][:gpus])
        self._take_ids(node, taken, cpu_millis, memory, extended)
        return taken

    def take_ids(
        self,
        node: str,
        gpu_ids: tuple[int, ...],
        cpu_millis: int,
        memory: int,
        extended: Extended = NO_EXTENDED,
    ) -> None:
        """Take these very GPUs back (undoing a ``give``; ignored for nodes not scheduled)."""
        if node in self._gpu_ids:
            self._take_ids(node, gpu_ids, cpu_millis, memory, extended)

    def give(
        self,
        node: str,
        gpu_ids: tuple[int, ...],
        cpu_millis: int,
        memory: int,
        extended: Extended = NO_EXTENDED,
    ) -> None:
        """Return capacity to ``node`` (ignored for nodes this overlay does not schedule)."""
        if node not in self._gpu_ids:
            return
        ids = self._gpu_ids[node]
        merged = sorted([*ids, *gpu_ids])
        self._resize(node, len(ids), len(merged))
        self._gpu_ids[node] = merged
        self._cpu[node] += cpu_millis
        self._memory[node] += memory
        if extended:
            self._shift_extended(node, extended, 1)
        self._record(False, node, gpu_ids, cpu_millis, memory, extended)

    def _take_ids(
        self,
        node: str,
        gpu_ids: tuple[int, ...],
        cpu_millis: int,
        memory: int,
        extended: Extended = NO_EXTENDED,
    ) -> None:
        ids = self._gpu_ids[node]
        rest = [i for i in ids if i not in gpu_ids] if gpu_ids else ids
        self._resize(node, len(ids), len(rest))
        self._gpu_ids[node] = rest
        self._cpu[node] -= cpu_millis
        self._memory[node] -= memory
        if extended:
            self._shift_extended(node, extended, -1)
        self._record(True, node, gpu_ids, cpu_millis, memory, extended)

    def _shift_extended(self, node: str, extended: Extended, sign: int) -> None:
        """Add (``sign`` 1) or take (-1) extended resources on a node, in a new dict: the
        index's and other overlays' copies stay as they were."""
        free = dict(self._extended.get(node, {}))
        for name, amount in extended:
            free[name] = free.get(name, 0) + sign * amount
        self._extended[node] = free

    def _record(
        self,
        taken: bool,
        node: str,
        gpu_ids: tuple[int, ...],
        cpu_millis: int,
        memory: int,
        extended: Extended,
    ) -> None:
        if self._undoing:
            return
        self._live_changes += 1
        self._states += 1
        self._state = self._states
        if self._transactions:
            self._transactions[-1].changes.append(
                (taken, node, gpu_ids, cpu_millis, memory, extended)
            )

    def transaction(self) -> AbstractContextManager[Transaction[_Change]]:
        """Group changes; unless committed, they are all undone on exit.

        Transactions nest: a committed inner one becomes part of the outer one, which can still
        undo it (a "what if" asks whether a gang would fit after giving capacity back).
        """
        state = self._state

        def undo(changes: list[_Change]) -> None:
            self._undo(changes)
            self._state = state  # the very capacity it began with

        return nested(self._transactions, undo)

    def _undo(self, changes: list[_Change]) -> None:
        self._undoing = True
        try:
            for taken, node, gpu_ids, cpu_millis, memory, extended in reversed(changes):
                if taken:
                    self.give(node, gpu_ids, cpu_millis, memory, extended)
                else:
                    self._take_ids(node, gpu_ids, cpu_millis, memory, extended)
        finally:
            self._undoing = False
        self._live_changes -= len(changes)

    def _resize(self, node: str, old_free: int, new_free: int) -> None:
        if old_free == new_free:
            return
        old = self._own_bucket(old_free)
        del old[bisect.bisect_left(old, node)]
        bisect.insort(self._own_bucket(new_free), node)
        if new_free > self._max_free:
            self._max_free = new_free
        delta = new_free - old_free
        self._total_free += delta
        for free, domain in zip(self._domain_free, self.index.domains_of[node], strict=False):
            free[domain] += delta

    def _own_bucket(self, free: int) -> list[str]:
        """The bucket's list, copied from the index's before this overlay first changes it."""
        if free not in self._own_buckets:
            self._own_buckets.add(free)
            self._buckets[free] = list(self._buckets.get(free, ()))
        return self._buckets[free]
