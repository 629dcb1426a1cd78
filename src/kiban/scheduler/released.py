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
    best fit would place the job's one task on it, off the ``kept`` nodes (``place``).

    The replicas each node could hold (``room``) are counted once, then kept up to date as
    capacity is given back, summed over the nodes and over each topology domain: whether the
    gang fits anywhere, or in a domain, is a sum compared, and only a gang that fits is laid
    out node by node.
    """

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
        self._per_node = _UNLIMITED if task.max_per_node is None else max(task.max_per_node, 0)
        self._freed: dict[str, list[int]] = {}  # node -> GPUs, CPU, memory given back so far
        self._room: dict[str, int] = {}  # the nodes the task may use -> replicas they hold
        self._total = 0
        constraint = task.nodes
        views = overlay.nodes
        for name in overlay.schedulable():
            if name in self._kept:
                continue
            if constraint is not None and not constraint.allows(name, views[name].labels):
                continue
            room = self._room_of(
                overlay.free_gpus(name), overlay.free_cpu(name), overlay.free_memory(name)
            )
            self._room[name] = room
            self._total += room
        # Per topology level, the replicas each domain's nodes hold and the GPUs given back
        # in it (only for a gang that asks for a domain).
        self._domain_room: list[dict[tuple[str, ...], int]] = []
        self._domain_freed: list[dict[tuple[str, ...], int]] = []
        if job.topology is not None:
            self._domain_room = [{} for _ in range(overlay.levels)]
            self._domain_freed = [{} for _ in range(overlay.levels)]
            domains_of = overlay.index.domains_of
            for name, room in self._room.items():
                for level, domain in enumerate(domains_of[name]):
                    rooms = self._domain_room[level]
                    rooms[domain] = rooms.get(domain, 0) + room

    def _room_of(self, free: int, cpu: int, memory: int) -> int:
        """How many of the task's replicas a node with this much free holds (best fit takes
        from a node while it fits, so its replicas never depend on other nodes)."""
        task = self._task
        return min(
            free // task.gpu,
            _times(cpu, task.cpu_millis),
            _times(memory, task.memory),
            self._per_node,
        )

    def give(self, node: str, gpus: int, cpu_millis: int, memory: int) -> None:
        """Give a replica's capacity back (ignored on nodes the overlay does not schedule, as
        ``CapacityOverlay.give`` ignores it)."""
        overlay = self._overlay
        if not overlay.schedules(node):
            return
        freed = self._freed.get(node)
        if freed is None:
            freed = self._freed[node] = [gpus, cpu_millis, memory]
        else:
            freed[0] += gpus
            freed[1] += cpu_millis
            freed[2] += memory
        domains = overlay.index.domains_of[node] if self._domain_freed else ()
        for level, domain in enumerate(domains):
            given = self._domain_freed[level]
            given[domain] = given.get(domain, 0) + gpus
        before = self._room.get(node)
        if before is None:
            return  # kept for others, or not the task's
        after = self._room_of(
            overlay.free_gpus(node) + freed[0],
            overlay.free_cpu(node) + freed[1],
            overlay.free_memory(node) + freed[2],
        )
        if after != before:
            self._room[node] = after
            self._total += after - before
            for level, domain in enumerate(domains):
                self._domain_room[level][domain] += after - before

    def _holds(self, room: int) -> bool:
        """Whether nodes holding ``room`` replicas in all take at least the gang."""
        return min(self._task.replicas, room) >= self._job.gang_size

    def place(self) -> frozenset[str] | None:
        """The nodes ``Cycle.try_place`` would put the gang on, with the capacity given back
        so far and off the kept nodes (None: it would not fit): ``place_in_topology``'s
        search over domains when the job asks for one, ``place_gang``'s otherwise."""
        if not self._holds(self._total):
            return None  # fits no domain either
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
        given = self._domain_freed[level]
        candidates = sorted(
            (free + given.get(domain, 0), domain)
            for domain, free in overlay.domains(level).items()
            if free + given.get(domain, 0) >= needed
            and (spread <= 1 or len(overlay.domain_nodes(level, domain)) >= spread)
        )
        rooms = self._domain_room[level]
        for _free, domain in candidates[:MAX_DOMAIN_TRIES]:
            if self._holds(rooms.get(domain, 0)):
                return self._fill(overlay.domain_members(level, domain))
        return None

    def _fill(self, within: Collection[str] | None) -> frozenset[str]:
        """The nodes ``place_gang`` of the one task on these nodes (None: all) uses, when the
        gang fits there: the nodes that hold some, fewest free GPUs first (then by name), until
        they hold every replica or all they can."""
        overlay = self._overlay
        room = self._room
        freed = self._freed
        order: list[tuple[int, str, int]] = []
        for name in room if within is None else within:
            held = room.get(name, 0)
            if held > 0:
                given = freed.get(name)
                free = overlay.free_gpus(name) + (0 if given is None else given[0])
                order.append((free, name, held))
        order.sort()
        placed = min(self._task.replicas, sum(held for _f, _n, held in order))
        used: list[str] = []
        for _free, name, held in order:
            if placed <= 0:
                break
            used.append(name)
            placed -= held
        return frozenset(used)
