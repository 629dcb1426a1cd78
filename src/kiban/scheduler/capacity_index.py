"""Free capacity of one flavor's nodes, indexed for best-fit and kept up to date node by node.

Building the index for 16,384 nodes costs more than the rest of a scheduling cycle, while
between two cycles only the nodes where jobs started or ended change. ``CapacityCache`` keeps
one index per flavor across cycles and updates only the nodes whose view changed. The index is
canonical (every list sorted by node name, empty entries dropped), so one kept up to date equals
one built afresh, and decisions never depend on the cache's history.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import compress
from operator import is_not

from kiban.scheduler.feasibility import EmptyCluster, NodeSize
from kiban.scheduler.reasons import PendingReason
from kiban.scheduler.snapshot import Extended, NodeView, PendingJob, TopologyRequest, extended_of

NodeShape = tuple[int, int, int, bool, Extended]
"""A node's capacity (GPUs, CPU millis, memory), whether it is schedulable, and the extended
resources it advertises."""


def node_shape(node: NodeView) -> NodeShape:
    extended = extended_of(node.extended) if node.extended else ()
    return (node.gpus, node.cpu_millis, node.memory, node.schedulable, extended)


def _insert(items: list[str], name: str) -> None:
    bisect.insort(items, name)


def _remove(items: list[str], name: str) -> None:
    del items[bisect.bisect_left(items, name)]


GangShape = tuple[tuple[object, ...], int, TopologyRequest | None, tuple[str, ...]]
"""What a gang's placement depends on besides the free capacity and the nodes kept for others:
its tasks (sizes, replicas, node constraints and preferences, spread, extended resources, and
the task names its reasons quote), its gang size, its topology request, and the topology
levels. Jobs of one shape fit or fail alike, for the same reason."""


def gang_shape(job: PendingJob, levels: tuple[str, ...]) -> GangShape:
    return (job.tasks, job.gang_size, job.topology, levels)


class CapacityIndex:
    """What is free on each schedulable node of a flavor, bucketed by free GPU count.

    Also kept: free and total GPUs per topology domain (every prefix of a node's topology
    path) and how many nodes have each capacity shape, so that "could any node or domain ever
    hold this" is answered without visiting every node.
    """

    def __init__(self, nodes: Iterable[NodeView] = ()) -> None:
        self.nodes: dict[str, NodeView] = {}
        self.gpu_ids: dict[str, list[int]] = {}  # schedulable nodes only, as are the next ones
        self.cpu: dict[str, int] = {}
        self.memory: dict[str, int] = {}
        # free extended resources of the schedulable nodes that advertise any (most do not);
        # a node's dict is replaced, never changed in place, so overlays may share it
        self.extended: dict[str, dict[str, int]] = {}
        self.buckets: dict[int, list[str]] = {}
        self.total_free = 0
        self.max_free = 0
        self.levels = 0
        self.domain_free: list[dict[tuple[str, ...], int]] = []
        self.domain_size: list[dict[tuple[str, ...], int]] = []
        self.domain_nodes: list[dict[tuple[str, ...], list[str]]] = []
        # each schedulable node's domains, outermost first (the prefixes of its topology path)
        self.domains_of: dict[str, tuple[tuple[str, ...], ...]] = {}
        # the same members as sets, made when first asked for and forgotten when a node joins
        # or leaves (a change of what is free on a node does not change them)
        self._domain_sets: dict[tuple[int, tuple[str, ...]], frozenset[str]] = {}
        self.shapes: Counter[NodeShape] = Counter()
        # What gangs failed to fit on this very capacity (see ``failures``): forgotten at the
        # first change of any node, so an entry always describes the index as it is.
        self._failures: dict[GangShape, PendingReason] = {}
        for node in sorted(nodes, key=lambda n: n.name):
            self.add(node)

    @property
    def failures(self) -> dict[GangShape, PendingReason]:
        """Memo of the placements that failed on the index as it is now, by gang shape, and
        why, for the cycles that try a blocked head, or a job of the same shape, again while
        nothing changed (``Cycle.known_failure``).
        Every change of a node (``add``, ``remove``, ``update``) empties it."""
        return self._failures

    def domain_members(self, level: int, domain: tuple[str, ...]) -> frozenset[str]:
        """The schedulable nodes of one domain of a topology level, as a set (for best fit
        inside the domain: ``CapacityOverlay.best_fit``)."""
        key = (level, domain)
        members = self._domain_sets.get(key)
        if members is None:
            members = frozenset(self.domain_nodes[level].get(domain, ()))
            self._domain_sets[key] = members
        return members

    def add(self, node: NodeView) -> None:
        """Index a node not indexed yet."""
        self._failures.clear()
        self._domain_sets.clear()
        self.nodes[node.name] = node
        self.shapes[node_shape(node)] += 1
        if not node.schedulable:
            return
        free = sorted(node.free_gpu_ids)
        self.gpu_ids[node.name] = free
        self.cpu[node.name] = node.free_cpu_millis
        self.memory[node.name] = node.free_memory
        if node.extended:
            self.extended[node.name] = dict(node.free_extended)
        _insert(self.buckets.setdefault(len(free), []), node.name)
        self.total_free += len(free)
        self.max_free = max(self.max_free, len(free))
        self.domains_of[node.name] = tuple(
            node.topology[: level + 1] for level in range(len(node.topology))
        )
        while self.levels < len(node.topology):
            self.domain_free.append({})
            self.domain_size.append({})
            self.domain_nodes.append({})
            self.levels += 1
        for level in range(len(node.topology)):
            domain = node.topology[: level + 1]
            self.domain_free[level][domain] = self.domain_free[level].get(domain, 0) + len(free)
            self.domain_size[level][domain] = self.domain_size[level].get(domain, 0) + node.gpus
            _insert(self.domain_nodes[level].setdefault(domain, []), node.name)

    def remove(self, name: str) -> None:
        """Forget a node (it changed, moved to another flavor, or left the cluster)."""
        self._failures.clear()
        self._domain_sets.clear()
        node = self.nodes.pop(name)
        shape = node_shape(node)
        self.shapes[shape] -= 1
        if not self.shapes[shape]:
            del self.shapes[shape]
        if not node.schedulable:
            return
        free = len(self.gpu_ids.pop(name))
        del self.cpu[name], self.memory[name], self.domains_of[name]
        self.extended.pop(name, None)
        bucket = self.buckets[free]
        _remove(bucket, name)
        if not bucket:
            del self.buckets[free]
            if free == self.max_free:
                self.max_free = max(self.buckets, default=0)
        self.total_free -= free
        for level in range(len(node.topology)):
            domain = node.topology[: level + 1]
            members = self.domain_nodes[level][domain]
            _remove(members, name)
            if not members:
                del self.domain_nodes[level][domain]
                del self.domain_free[level][domain]
                del self.domain_size[level][domain]
                continue
            self.domain_free[level][domain] -= free
            self.domain_size[level][domain] -= node.gpus

    def update(self, old: NodeView, new: NodeView) -> None:
        """Re-index a node whose view changed (usually only what is free on it)."""
        self._failures.clear()
        same_shape = (
            old.schedulable
            and new.schedulable
            and old.topology == new.topology
            and old.gpus == new.gpus
            and old.cpu_millis == new.cpu_millis
            and old.memory == new.memory
            and (old.extended is new.extended or old.extended == new.extended)
        )
        if not same_shape:
            self.remove(old.name)
            self.add(new)
            return
        name = new.name
        self.nodes[name] = new
        before = len(self.gpu_ids[name])
        free = sorted(new.free_gpu_ids)
        self.gpu_ids[name] = free
        self.cpu[name] = new.free_cpu_millis
        self.memory[name] = new.free_memory
        if new.extended:
            self.extended[name] = dict(new.free_extended)
        delta = len(free) - before
        if not delta:
            return
        bucket = self.buckets[before]
        _remove(bucket, name)
        if not bucket:
            del self.buckets[before]
        _insert(self.buckets.setdefault(len(free), []), name)
        self.max_free = max(self.buckets, default=0)
        self.total_free += delta
        for level in range(len(new.topology)):
            self.domain_free[level][new.topology[: level + 1]] += delta


def same_node(a: NodeView, b: NodeView) -> bool:
    """Whether two views are of the same node as if idle: size, labels, flavor, topology."""
    return (
        a.gpus == b.gpus
        and a.cpu_millis == b.cpu_millis
        and a.memory == b.memory
        and a.extended == b.extended
        and a.flavor == b.flavor
        and a.topology == b.topology
        and a.labels == b.labels
    )


class CapacityCache:
    """One ``CapacityIndex`` per flavor, kept across the cycles of one caller.

    Nodes are compared by identity: a caller that reuses the ``NodeView`` of an unchanged node
    (the control loop, the benchmark and the forecast do) pays only for the nodes that changed;
    one that rebuilds every view pays a full rebuild, as without a cache. Indexes handed out are
    valid until the next call.
    """

    def __init__(self) -> None:
        self._views: dict[str, NodeView] = {}
        self._indexes: dict[str | None, CapacityIndex] = {}
        self._last: tuple[NodeView, ...] | None = None  # the nodes of the last call, in order
        self._empty: EmptyCluster | None = None  # the nodes as if idle, while they stay alike

    def empty_cluster(self, levels: tuple[str, ...]) -> EmptyCluster:
        """The nodes of the last ``indexes`` call as if idle (for "could this ever fit"), kept
        while no node joins, leaves, or changes its size, labels, flavor or topology."""
        empty = self._empty
        if empty is None or empty.levels != levels:
            flavors = {}
            for flavor, index in self._indexes.items():
                if flavor is None or not index.nodes:
                    continue
                sizes: Counter[NodeSize] = Counter()
                for (gpus, cpu_millis, memory, _up, extended), count in index.shapes.items():
                    sizes[(gpus, cpu_millis, memory, extended)] += count
                # The index's own table: its views change only in what is free while this
                # holds (any other change forgets it).
                flavors[flavor] = (index.nodes.values(), sizes)
            empty = self._empty = EmptyCluster(flavors, levels)
        return empty

    def indexes(self, nodes: Sequence[NodeView]) -> dict[str | None, CapacityIndex]:
        """The index of each flavor's nodes (key None: nodes of no flavor), up to date."""
        views = self._views
        last = self._last
        self._last = tuple(nodes)
        if last is not None and len(last) == len(nodes):
            # Usually the same nodes in the same order: only the changed views need a look.
            changed = list(compress(nodes, map(is_not, last, nodes)))
            if all(views.get(n.name) is not None for n in changed) and len(changed) < len(nodes):
                for node in changed:
                    self._reindex(views[node.name], node)
                return self._indexes
        for node in nodes:
            old = views.get(node.name)
            if old is node:
                continue
            if old is None:
                self._index(node.flavor).add(node)
                views[node.name] = node
                self._empty = None
            else:
                self._reindex(old, node)
        if len(views) != len(nodes):
            present = {node.name for node in nodes}
            for name in [name for name in views if name not in present]:
                self._indexes[views.pop(name).flavor].remove(name)
            self._empty = None
        return self._indexes

    def _reindex(self, old: NodeView, node: NodeView) -> None:
        """A node indexed as ``old`` is now ``node``."""
        if self._empty is not None and not same_node(old, node):
            self._empty = None
        if old.flavor == node.flavor:
            self._indexes[old.flavor].update(old, node)
        else:
            self._indexes[old.flavor].remove(old.name)
            self._index(node.flavor).add(node)
        self._views[node.name] = node

    def _index(self, flavor: str | None) -> CapacityIndex:
        index = self._indexes.get(flavor)
        if index is None:
            index = self._indexes[flavor] = CapacityIndex()
        return index
