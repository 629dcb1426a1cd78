"""A reservation's trial placements, decided by arithmetic on a light view of the capacity.

A reservation gives the running jobs' ends back one after another and, at each end where the
capacity arithmetic says the gang could fit, asks where best fit would place it. For a gang of
one task with no node preference and no extended resources the answer needs no placement: best
fit fills the fitting node with the fewest free GPUs (first by name) until it holds no more
replicas, then the next, and nodes do not share what they hold, so the gang fits where the
nodes' room for its replicas adds up to it, and lands on a prefix of the nodes in that order.
``ReleasedView`` keeps what was given back per node beside the overlay, which stays untouched:
no take, no give, no undo (the bucket moves and the undo log a trial on the overlay costs).
"""

from __future__ import annotations

from collections.abc import Collection

from kiban.scheduler.capacity import NO_SPREAD_LIMIT, CapacityOverlay
from kiban.scheduler.placement import MAX_DOMAIN_TRIES, gang_gpus, nodes_needed
from kiban.scheduler.snapshot import PendingJob, TaskDemand

_UNLIMITED = NO_SPREAD_LIMIT
"""The replicas a node could hold of a task that asks for none of a resource it has."""


def decidable(job: PendingJob) -> TaskDemand | None:
    """The job's one task when arithmetic decides its placement (None: it must be placed):
    GPUs per replica, no preferred nodes (they reorder best fit), no extended resources."""
    if len(job.tasks) != 1:
        return None
    task = job.tasks[0]
    if task.gpu <= 0 or task.prefers is not None or task.extended:
        return None
    return task


def _times(have: int, need: int) -> int:
    """How many takes of ``need`` fit ``have``, each checked as ``have >= need`` first."""
    if need <= 0:
        return _UNLIMITED if have >= need else 0
    return max(have // need, 0)


class ReleasedView:
    """The overlay's free capacity with some running replicas given back (``give``), and where
    best fit would place the job's one task on it, off the ``kept`` nodes (``place``)."""

    def __init__(
        self,
        job: PendingJob,
        task: TaskDemand,
        overlay: CapacityOverlay,
        kept: Collection[str],
        levels: tuple[str, ...],
    ) -> None:
        self._job = job
        self._task = task
        self._overlay = overlay
        self._kept = frozenset(kept)
        self._levels = levels
        self._freed: dict[str, list[int]] = {}  # node -> GPUs, CPU, memory given back so far

    def give(self, node: str, gpus: int, cpu_millis: int, memory: int) -> None:
        """Give a replica's capacity back (ignored on nodes the overlay does not schedule, as
        ``CapacityOverlay.give`` ignores it)."""
        if not self._overlay.schedules(node):
            return
        freed = self._freed.get(node)
        if freed is None:
            self._freed[node] = [gpus, cpu_millis, memory]
        else:
            freed[0] += gpus
            freed[1] += cpu_millis
            freed[2] += memory

    def place(self) -> frozenset[str] | None:
        """The nodes ``Cycle.try_place`` would put the gang on, with the capacity given back
        so far and off the kept nodes (None: it would not fit): ``place_in_topology``'s
        search over domains when the job asks for one, ``place_gang``'s otherwise."""
        request = self._job.topology
        if request is None:
            return self._fill(None)
        levels = self._levels
        if request.level not in levels:
            return None if request.required else self._fill(None)
        level = levels.index(request.level)
        for depth in range(level, level - 1 if request.required else -1, -1):
            nodes = self._in_some_domain(depth)
            if nodes is not None:
                return nodes
        return None if request.required else self._fill(None)

    def _in_some_domain(self, level: int) -> frozenset[str] | None:
        """``_place_in_some_domain``: the domains with GPUs enough, smallest free first."""
        overlay = self._overlay
        if level >= overlay.levels:
            return None
        needed = gang_gpus(self._job)
        spread = nodes_needed(self._job)
        free = overlay.domains(level)
        changed: dict[tuple[str, ...], int] = {}
        domains_of = overlay.index.domains_of
        for node, freed in self._freed.items():
            domains = domains_of[node]
            if level < len(domains):
                domain = domains[level]
                changed[domain] = changed.get(domain, free[domain]) + freed[0]
        candidates = sorted(
            (changed.get(domain, gpus), domain)
            for domain, gpus in free.items()
            if changed.get(domain, gpus) >= needed
            and (spread <= 1 or len(overlay.domain_nodes(level, domain)) >= spread)
        )
        for _free, domain in candidates[:MAX_DOMAIN_TRIES]:
            nodes = self._fill(overlay.domain_members(level, domain))
            if nodes is not None:
                return nodes
        return None

    def _fill(self, within: Collection[str] | None) -> frozenset[str] | None:
        """``place_gang`` of the one task on these nodes (None: all): the nodes it would use
        when at least the gang fits, else None."""
        overlay = self._overlay
        task = self._task
        kept = self._kept
        constraint = task.nodes
        per_node = _UNLIMITED if task.max_per_node is None else max(task.max_per_node, 0)
        views = overlay.nodes
        rooms: list[tuple[int, str, int]] = []
        total = 0
        for name in overlay.schedulable() if within is None else within:
            if name in kept:
                continue
            if constraint is not None and not constraint.allows(name, views[name].labels):
                continue
            free = overlay.free_gpus(name)
            cpu = overlay.free_cpu(name)
            memory = overlay.free_memory(name)
            freed = self._freed.get(name)
            if freed is not None:
                free += freed[0]
                cpu += freed[1]
                memory += freed[2]
            room = min(
                free // task.gpu,
                _times(cpu, task.cpu_millis),
                _times(memory, task.memory),
                per_node,
            )
            if room > 0:
                rooms.append((free, name, room))
                total += room
        placed = min(task.replicas, total)
        if placed < self._job.gang_size:
            return None
        rooms.sort()
        used: list[str] = []
        for _free, name, room in rooms:
            if placed <= 0:
                break
            used.append(name)
            placed -= room
        return frozenset(used)
