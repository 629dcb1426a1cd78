"""A reservation's trial placements, decided by arithmetic on a light view of the capacity.

A reservation gives the running jobs' ends back one after another and, at each end where the
capacity arithmetic says the gang could fit, asks where best fit would place it. For a gang of
one task with no node preference and no extended resources the answer needs no placement: best
fit fills the fitting node with the fewest free GPUs (first by name) until it holds no more
replicas, then the next, and nodes do not share what they hold, so the gang fits where the
nodes' room for its replicas adds up to it, and lands on a prefix of the nodes in that order.
``ReleasedView`` keeps what was given back per node beside the overlay, which stays untouched:
no take, no give, no undo (the bucket moves and the undo log a trial on the overlay costs).
A gang with no topology request needs no view of its own: ``Releases`` gives the ends back
once per capacity and task shape, and each reservation bisects its running totals.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Iterator, Sequence

from kiban.scheduler.capacity import NO_SPREAD_LIMIT, CapacityOverlay
from kiban.scheduler.placement import MAX_DOMAIN_TRIES, gang_gpus, nodes_needed
from kiban.scheduler.snapshot import PendingJob, RunningJob, TaskDemand


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
        return NO_SPREAD_LIMIT if have >= need else 0  # asks for none of it: no bound
    return max(have // need, 0)


def room_of(task: TaskDemand, free: int, cpu: int, memory: int) -> int:
    """How many of the task's replicas a node with this much free holds (best fit takes from
    a node while it fits, so what it holds never depends on other nodes)."""
    room = free // task.gpu
    per_node = task.max_per_node
    if per_node is not None and per_node < room:
        room = max(per_node, 0)
    if room:
        room = min(room, _times(cpu, task.cpu_millis), _times(memory, task.memory))
    return room


def best_fit_prefix(order: list[tuple[int, str, int]], replicas: int) -> frozenset[str]:
    """The nodes best fit fills, given (free GPUs, name, replicas it holds) for each node that
    holds some: fewest free first (then by name), until they hold every replica or all they can."""
    order.sort()
    placed = min(replicas, sum(held for _f, _n, held in order))
    used: list[str] = []
    for _free, name, held in order:
        if placed <= 0:
            break
        used.append(name)
        placed -= held
    return frozenset(used)


Freed = tuple[str, int, int, int]
"""GPUs, CPU millis and memory freed on a node."""

EndGroup = tuple[float, tuple[Freed, ...]]
"""An end of running jobs, and what their ends free on each schedulable node."""


class EndGroups:
    """The running jobs' ends (``Cycle.ending_on``), those at the same time together, with
    what each frees per schedulable node of the overlay, summed: what a reservation gives back
    end after end, worked out once per cycle rather than per reservation, and only as far as
    some reservation has asked (most fit long before the last end)."""

    __slots__ = ("_ending", "_groups", "_next", "_schedules")

    def __init__(
        self, ending: Sequence[tuple[float, RunningJob]], overlay: CapacityOverlay
    ) -> None:
        self._ending = ending
        self._schedules = overlay.schedules
        self._groups: list[EndGroup] = []
        self._next = 0  # the next running job to group

    @classmethod
    def made(cls, groups: Sequence[EndGroup], overlay: CapacityOverlay) -> EndGroups:
        """Ends already grouped, on the overlay."""
        ends = cls((), overlay)
        ends._groups = list(groups)
        return ends

    def get(self, k: int) -> EndGroup | None:
        """The ``k``-th end (None: there are fewer)."""
        groups = self._groups
        while k >= len(groups):
            if not self._group_next():
                return None
        return groups[k]

    def __iter__(self) -> Iterator[EndGroup]:
        k = 0
        while (group := self.get(k)) is not None:
            yield group
            k += 1

    def _group_next(self) -> bool:
        """Group the jobs ending at the next end (False: none is left)."""
        ending = self._ending
        k = self._next
        if k >= len(ending):
            return False
        schedules = self._schedules
        freeing: dict[str, list[int]] = {}
        end = ending[k][0]
        while k < len(ending) and ending[k][0] == end:  # released together
            for replica in ending[k][1].replicas:
                node = replica.node
                if not schedules(node):
                    continue
                freed = freeing.get(node)
                if freed is None:
                    freeing[node] = [len(replica.gpu_ids), replica.cpu_millis, replica.memory]
                else:
                    freed[0] += len(replica.gpu_ids)
                    freed[1] += replica.cpu_millis
                    freed[2] += replica.memory
            k += 1
        self._next = k
        self._groups.append((end, tuple((node, f[0], f[1], f[2]) for node, f in freeing.items())))
        return True


RoomMemo = dict[tuple[object, ...], "Rooms"]
"""Each task shape's ``Rooms`` on one capacity (a cycle's, keyed by overlay state)."""


class Rooms:
    """The replicas of a task each schedulable node it may use holds, on the overlay as it is
    (every node, kept or not), their sum, and their sum per topology domain."""

    __slots__ = ("_releases", "domain_room", "room", "total")

    def __init__(self, task: TaskDemand, overlay: CapacityOverlay) -> None:
        constraint = task.nodes
        views = overlay.nodes
        self.room: dict[str, int] = {}
        self.total = 0
        self._releases: Releases | None = None
        self.domain_room: list[dict[tuple[str, ...], int]] = [{} for _ in range(overlay.levels)]
        domains_of = overlay.index.domains_of
        free_gpus, free_cpu, free_memory = overlay.free_gpus, overlay.free_cpu, overlay.free_memory
        rooms_of = self.room
        total = 0
        by_domain = self.domain_room if overlay.levels else None
        for name in overlay.schedulable():
            if constraint is not None and not constraint.allows(name, views[name].labels):
                continue
            room = room_of(task, free_gpus(name), free_cpu(name), free_memory(name))
            rooms_of[name] = room
            total += room
            if by_domain is not None:
                for level, domain in enumerate(domains_of[name]):
                    rooms = by_domain[level]
                    rooms[domain] = rooms.get(domain, 0) + room
        self.total = total

    @classmethod
    def remembered(cls, task: TaskDemand, overlay: CapacityOverlay, memo: RoomMemo) -> Rooms:
        """The task's rooms on the overlay's capacity now, counted once per capacity and task
        shape (a cycle's reservations share them: reserving takes no capacity)."""
        key = (overlay.state, task.gpu, task.cpu_millis, task.memory, task.max_per_node, task.nodes)
        rooms = memo.get(key)
        if rooms is None:
            rooms = memo[key] = cls(task, overlay)
        return rooms

    def releases(self, task: TaskDemand, overlay: CapacityOverlay, groups: EndGroups) -> Releases:
        """What giving these ends back does to the rooms (made once per list of ends: the
        reservations of one capacity and task shape share it)."""
        known = self._releases
        if known is None or known.groups is not groups:
            known = self._releases = Releases(task, overlay, self, groups)
        return known


class Releases:
    """The ends given back one after another to one task shape's rooms on one capacity, with
    no node kept: the replicas all the task's nodes hold after each end (``totals``, never
    falling), and each node's changes, so that any reservation of the shape finds the first
    end where it could fit by bisection and reads a node's room at that end without giving
    anything back itself. Worked out end by end as far as some reservation has asked."""

    __slots__ = (
        "_ends",
        "_freed",
        "_history",
        "_next",
        "_room",
        "_task",
        "_total",
        "groups",
        "overlay",
    )

    def __init__(
        self, task: TaskDemand, overlay: CapacityOverlay, rooms: Rooms, groups: EndGroups
    ) -> None:
        self._task = task
        self.overlay = overlay
        self.groups = groups
        self._room = rooms.room  # before any end (read only)
        self._freed: dict[str, list[int]] = {}  # node -> GPUs, CPU, memory given back so far
        # node -> the ends (indexes) after which its room changed, and its room and GPUs given
        # back then
        self._history: dict[str, tuple[list[int], list[tuple[int, int]]]] = {}
        self._ends: list[int] = []  # after each end worked out, the replicas held in all
        self._next = 0  # the next end to work out
        self._total = rooms.total

    def first_holding(self, count: int, start: int = 0) -> int | None:
        """The first end (from ``start``) after which all the task's nodes hold at least
        ``count`` replicas (None: after none)."""
        ends = self._ends
        while not ends or ends[-1] < count:
            if self.groups.get(self._next) is None:
                return None
            self._work_out_next()
        return bisect_left(ends, count, start)

    def _work_out_next(self) -> None:
        """Give the next end back: each node's room, changed where it changes."""
        task = self._task
        overlay = self.overlay
        base = self._room
        freed_on = self._freed
        history = self._history
        k = self._next
        group = self.groups.get(k)
        assert group is not None  # asked for by ``first_holding``
        for node, gpus, cpu_millis, memory in group[1]:
            before = base.get(node)
            if before is None:
                continue  # not the task's
            freed = freed_on.get(node)
            if freed is None:
                freed = freed_on[node] = [gpus, cpu_millis, memory]
                changes = history[node] = ([], [])
            else:
                freed[0] += gpus
                freed[1] += cpu_millis
                freed[2] += memory
                changes = history[node]
                if changes[1]:
                    before = changes[1][-1][0]
            after = room_of(
                task,
                overlay.free_gpus(node) + freed[0],
                overlay.free_cpu(node) + freed[1],
                overlay.free_memory(node) + freed[2],
            )
            if changes[0] and changes[0][-1] == k:
                changes[1][-1] = (after, freed[0])
            else:
                changes[0].append(k)
                changes[1].append((after, freed[0]))
            self._total += after - before
        self._ends.append(self._total)
        self._next = k + 1

    def end(self, k: int) -> float:
        """When end ``k`` (one worked out) comes."""
        group = self.groups.get(k)
        assert group is not None
        return group[0]

    def at(self, node: str, k: int) -> tuple[int, int]:
        """The node's room after end ``k``, and the GPUs given back on it by then."""
        changes = self._history.get(node)
        if changes is not None:
            i = bisect_right(changes[0], k) - 1
            if i >= 0:
                return changes[1][i]
        return self._room[node], 0

    def held(self, nodes: Collection[str], k: int) -> int:
        """The replicas these nodes hold in all after end ``k`` (those not the task's: none)."""
        room = self._room
        return sum(self.at(node, k)[0] for node in nodes if node in room)

    def fill(self, replicas: int, k: int, kept: Collection[str]) -> frozenset[str]:
        """``ReleasedView._fill`` over all the task's nodes off the kept ones after end ``k``."""
        free_gpus = self.overlay.free_gpus
        order: list[tuple[int, str, int]] = []
        for name in self._room:
            if name in kept:
                continue
            held, given = self.at(name, k)
            if held > 0:
                order.append((free_gpus(name) + given, name, held))
        return best_fit_prefix(order, replicas)


def first_fit(
    job: PendingJob,
    task: TaskDemand,
    overlay: CapacityOverlay,
    kept: Collection[str],
    levels: tuple[str, ...],
    memo: RoomMemo,
    groups: EndGroups,
) -> tuple[float, frozenset[str]] | None:
    """``ReleasedView.first_fit`` on a fresh view: the first end after which the gang fits
    off the kept nodes, with the nodes it would use (None: none). A gang with no topology
    request fits where its nodes hold it, so the end is found on the shape's shared
    ``Releases`` (a bisection to the first end where all nodes hold it, then, where nodes are
    kept, a skip past ends where the kept ones hold too much) and nothing is given back."""
    request = job.topology
    if request is not None:
        if request.level in levels:
            return ReleasedView(job, task, overlay, kept, levels, memo).first_fit(groups)
        if request.required:
            return None  # a level the cluster lacks: it fits at no end
        # a preferred level the cluster lacks: placed as if it asked for none
    wanted = job.gang_size
    if task.replicas < wanted:
        return None
    releases = Rooms.remembered(task, overlay, memo).releases(task, overlay, groups)
    kept = set(kept)
    k = releases.first_holding(wanted)
    while k is not None:
        off = releases.held(kept, k) if kept else 0
        if off == 0:
            return releases.end(k), releases.fill(task.replicas, k, kept)
        later = releases.first_holding(wanted + off, k)
        if later == k:  # what the kept nodes hold at k cannot grow later than k itself
            return releases.end(k), releases.fill(task.replicas, k, kept)
        k = later
    return None


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
        memo: RoomMemo | None = None,
    ) -> None:
        self._job = job
        self._task = task
        self._overlay = overlay
        self._levels = levels
        self._freed: dict[str, list[int]] = {}  # node -> GPUs, CPU, memory given back so far
        base = Rooms.remembered(task, overlay, {} if memo is None else memo)
        # the nodes the task may use, off the kept ones -> the replicas they hold
        self._room = dict(base.room)
        self._total = base.total
        # Per topology level, the replicas each domain's nodes hold and the GPUs given back
        # in it (only for a gang that asks for a domain).
        self._domain_room: list[dict[tuple[str, ...], int]] = []
        self._domain_freed: list[dict[tuple[str, ...], int]] = []
        topology = job.topology is not None
        if topology:
            self._domain_room = [dict(rooms) for rooms in base.domain_room]
            self._domain_freed = [{} for _ in range(overlay.levels)]
        domains_of = overlay.index.domains_of
        for name in kept:
            room = self._room.pop(name, None)
            if room is None:
                continue
            self._total -= room
            if topology:
                for level, domain in enumerate(domains_of[name]):
                    self._domain_room[level][domain] -= room

    def give(self, node: str, gpus: int, cpu_millis: int, memory: int) -> None:
        """Give a replica's capacity back (ignored on nodes the overlay does not schedule, as
        ``CapacityOverlay.give`` ignores it)."""
        if self._overlay.schedules(node):
            self._give(((node, gpus, cpu_millis, memory),))

    def _give(self, freeing: Sequence[Freed]) -> None:
        """Give back what is freed on these schedulable nodes."""
        overlay = self._overlay
        task = self._task
        rooms = self._room
        freed_on = self._freed
        domain_freed = self._domain_freed
        domains_of = overlay.index.domains_of
        for node, gpus, cpu_millis, memory in freeing:
            freed = freed_on.get(node)
            if freed is None:
                freed = freed_on[node] = [gpus, cpu_millis, memory]
            else:
                freed[0] += gpus
                freed[1] += cpu_millis
                freed[2] += memory
            domains = domains_of[node] if domain_freed else ()
            for level, domain in enumerate(domains):
                given = domain_freed[level]
                given[domain] = given.get(domain, 0) + gpus
            before = rooms.get(node)
            if before is None:
                continue  # kept for others, or not the task's
            after = room_of(
                task,
                overlay.free_gpus(node) + freed[0],
                overlay.free_cpu(node) + freed[1],
                overlay.free_memory(node) + freed[2],
            )
            if after != before:
                rooms[node] = after
                self._total += after - before
                for level, domain in enumerate(domains):
                    self._domain_room[level][domain] += after - before

    def first_fit(self, groups: Iterable[EndGroup]) -> tuple[float, frozenset[str]] | None:
        """Give the ends back in order (``end_groups``) and return the first end after which
        the gang fits, with the nodes it would use (None: none)."""
        wanted = self._job.gang_size
        replicas = self._task.replicas
        give = self._give
        for end, freeing in groups:
            give(freeing)
            if min(replicas, self._total) < wanted:
                continue  # it fits no domain either
            nodes = self.place()
            if nodes is not None:
                return end, nodes
        return None

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
        return best_fit_prefix(order, self._task.replicas)
