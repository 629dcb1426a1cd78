"""Gang placement: put a job's replicas on nodes best-fit (the nodes a task's preferred node
affinity scores higher first), all of the gang or none.

With a topology request the gang goes into the smallest domain of the level that holds it
(best-fit over domains, then best-fit over the domain's nodes), which keeps large domains
whole for large gangs.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from kiban.scheduler.capacity import NO_SPREAD_LIMIT, CapacityOverlay, NodeFilter
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.scheduler.snapshot import (
    Extended,
    NodeView,
    PendingJob,
    TaskDemand,
    TopologyRequest,
)

MAX_DOMAIN_TRIES = 8
"""Domains tried per level, smallest free first; past them a gang is taken not to fit there."""


@dataclass(frozen=True, slots=True)
class GangAttempt:
    """The placements found (committed only if ``fits``) and how many replicas could be placed."""

    placements: tuple[ReplicaPlacement, ...]
    placed: int
    fits: bool


NO_FIT = GangAttempt((), 0, False)


def place_gang(
    job: PendingJob,
    overlay: CapacityOverlay,
    allow: NodeFilter | None = None,
    within: Collection[str] | None = None,
) -> GangAttempt:
    """Place replicas in rank order; commit if at least the gang fits, else leave nothing behind."""
    # (task, index, node, GPU ids) per replica placed: the placements are made only for a
    # gang that fits (most attempts of a contended cycle fail)
    placed: list[tuple[TaskDemand, int, str, tuple[int, ...]]] = []
    with overlay.transaction() as tx:
        for task in job.tasks:
            task_allow = task_filter(task, allow)
            extended = task.extended
            if extended:
                task_allow = overlay.extended_filter(extended, task_allow)
            held: dict[str, int] | None = None
            if task.max_per_node is not None:
                held = {}
                task_allow = _spread_filter(task.max_per_node, held, task_allow)
            for index in range(task.replicas):
                node = overlay.best_fit(
                    task.gpu, task.cpu_millis, task.memory, task_allow, within, task.prefers
                )
                if node is None:
                    break
                if held is not None:
                    held[node] = held.get(node, 0) + 1
                gpu_ids = overlay.take(node, task.gpu, task.cpu_millis, task.memory, extended)
                placed.append((task, index, node, gpu_ids))
            else:
                continue
            break
        if len(placed) >= job.gang_size:
            tx.commit()
            placements = tuple(
                ReplicaPlacement(
                    task=task.name,
                    index=index,
                    rank=rank,
                    node=node,
                    gpu_ids=gpu_ids,
                    cpu_millis=task.cpu_millis,
                    memory=task.memory,
                    extended=task.extended,
                )
                for rank, (task, index, node, gpu_ids) in enumerate(placed)
            )
            return GangAttempt(placements, len(placements), True)
    return GangAttempt((), len(placed), False)


def task_filter(task: TaskDemand, allow: NodeFilter | None) -> NodeFilter | None:
    """``allow``, narrowed to the nodes the task's node constraint admits."""
    nodes = task.nodes
    if nodes is None:
        return allow

    def admits(node: NodeView) -> bool:
        return nodes.allows(node.name, node.labels) and (allow is None or allow(node))

    return admits


def _spread_filter(limit: int, held: dict[str, int], allow: NodeFilter | None) -> NodeFilter:
    """``allow``, narrowed to the nodes that hold fewer than ``limit`` of the task's replicas
    placed so far (``held``, kept up to date by the caller)."""

    def admits(node: NodeView) -> bool:
        return held.get(node.name, 0) < limit and (allow is None or allow(node))

    return admits


def place_in_topology(
    job: PendingJob,
    overlay: CapacityOverlay,
    request: TopologyRequest,
    levels: tuple[str, ...],
    allow: NodeFilter | None = None,
) -> GangAttempt:
    """Place the gang inside one domain of the requested level; if only preferred, widen it.

    A preferred request tries the level, then each enclosing level, then the whole cluster.
    """
    if request.level not in levels:
        return NO_FIT if request.required else place_gang(job, overlay, allow)
    level = levels.index(request.level)
    tried = range(level, level - 1 if request.required else -1, -1)
    for depth in tried:
        attempt = _place_in_some_domain(job, overlay, depth, allow)
        if attempt.fits:
            return attempt
    return NO_FIT if request.required else place_gang(job, overlay, allow)


def _place_in_some_domain(
    job: PendingJob, overlay: CapacityOverlay, level: int, allow: NodeFilter | None
) -> GangAttempt:
    if level >= overlay.levels:
        return NO_FIT
    needed = gang_gpus(job)
    spread = nodes_needed(job)
    candidates = sorted(
        (free, domain)
        for domain, free in overlay.domains(level).items()
        if free >= needed and (spread <= 1 or len(overlay.domain_nodes(level, domain)) >= spread)
    )
    for _free, domain in candidates[:MAX_DOMAIN_TRIES]:
        attempt = place_gang(job, overlay, allow, within=overlay.domain_members(level, domain))
        if attempt.fits:
            return attempt
    return NO_FIT


def holds_extended(has: Extended, needs: Extended) -> bool:
    """Whether capacity ``has`` covers one replica's ``needs`` (both sorted pairs)."""
    advertised = dict(has)
    return all(advertised.get(name, 0) >= amount for name, amount in needs)


def could_fit(job: PendingJob, overlay: CapacityOverlay, excluded: Collection[str] = ()) -> bool:
    """A quick necessary condition for the gang to fit the overlay's free GPUs off the
    ``excluded`` nodes (no placement search): enough GPUs in all, and enough room for the
    replicas of each task's size, at most ``max_per_node`` of them on a node."""
    free = overlay.total_free_gpus() - sum(overlay.free_gpus(node) for node in excluded)
    if free < gang_gpus(job):
        return False
    left = job.gang_size
    for task in job.tasks:
        take = min(left, task.replicas)
        if take and overlay.replica_slots(task.gpu, task.max_per_node, excluded) < take:
            return False
        left -= take
        if left <= 0:
            break
    return True


class RoomCount:
    """``could_fit`` kept up to date by arithmetic as GPUs are freed or taken node by node,
    without changing the overlay: the free GPUs off the ``kept`` nodes and the replica slots of
    each task's size. A what-if that frees capacity step by step (a reservation's ends, a
    victim search's victims) changes the overlay and places the gang only where this says it
    could fit. Changes on kept or unscheduled nodes do not count, as they do not there."""

    def __init__(self, job: PendingJob, overlay: CapacityOverlay, kept: Collection[str]) -> None:
        self._overlay = overlay
        self._kept = frozenset(n for n in kept if overlay.schedules(n))
        self._needed = gang_gpus(job)
        self._demands = replica_demands(job)
        self._free = overlay.total_free_gpus() - sum(overlay.free_gpus(n) for n in self._kept)
        self._slots = [overlay.replica_slots(gpu, cap, self._kept) for gpu, cap, _ in self._demands]
        self._free_on: dict[str, int] = {}  # the nodes changed so far: their free GPUs now

    def change(self, node: str, gpus: int) -> None:
        """Count ``gpus`` GPUs freed on the node (taken, when negative)."""
        if not gpus or node in self._kept or not self._overlay.schedules(node):
            return
        before = self._free_on.get(node)
        if before is None:
            before = self._overlay.free_gpus(node)
        after = self._free_on[node] = before + gpus
        self._free += gpus
        slots = self._slots
        for i, (gpu, cap, _take) in enumerate(self._demands):
            if gpu > 0:
                slots[i] += min(after // gpu, cap) - min(before // gpu, cap)

    def fits(self) -> bool:
        """What ``could_fit`` says of the overlay with the changes counted so far made."""
        if self._free < self._needed:
            return False
        return all(n >= take for n, (_g, _c, take) in zip(self._slots, self._demands, strict=True))


def replica_demands(job: PendingJob) -> list[tuple[int, int, int]]:
    """Per task of the gang: GPUs of a replica, the most replicas a node may hold (a large
    number when the task does not limit it) and how many of its replicas the gang needs: what
    the capacity arithmetic of a reservation counts room for, as ``replica_slots`` does."""
    left = job.gang_size
    demands: list[tuple[int, int, int]] = []
    for task in job.tasks:
        take = min(left, task.replicas)
        if take:
            cap = NO_SPREAD_LIMIT if task.max_per_node is None else task.max_per_node
            demands.append((task.gpu, cap, take))
        left -= take
        if left <= 0:
            break
    return demands


def gang_gpus(job: PendingJob) -> int:
    """GPUs of the first ``gang_size`` replicas in rank order: what must fit at once."""
    left = job.gang_size
    total = 0
    for task in job.tasks:
        take = min(left, task.replicas)
        total += take * task.gpu
        left -= take
        if left <= 0:
            break
    return total


def nodes_needed(job: PendingJob) -> int:
    """The fewest nodes the gang can use: its task that spreads widest, at most
    ``max_per_node`` of that task's replicas on a node (1 when no task limits it)."""
    left = job.gang_size
    widest = 1
    for task in job.tasks:
        take = min(left, task.replicas)
        if task.max_per_node is not None and take:
            widest = max(widest, -(-take // task.max_per_node))
        left -= take
        if left <= 0:
            break
    return widest


def domain_could_hold(job: PendingJob, overlay: CapacityOverlay, level: int) -> bool:
    """Whether some domain of the level has enough GPUs in all (free or not) for the gang."""
    if level >= overlay.levels:
        return False
    needed = gang_gpus(job)
    return any(size >= needed for size in overlay.index.domain_size[level].values())


def task_fits_some_node(task: TaskDemand, overlay: CapacityOverlay) -> tuple[bool, int]:
    """Whether an idle schedulable node could hold one replica, and how many unschedulable could."""
    if task.nodes is not None:
        return overlay.constrained_fit(
            task.gpu, task.cpu_millis, task.memory, task.nodes, task.extended
        )
    fits = False
    blocked = 0
    for (gpus, cpu_millis, memory, schedulable, has), count in overlay.index.shapes.items():
        if gpus < task.gpu or cpu_millis < task.cpu_millis or memory < task.memory:
            continue
        if task.extended and not holds_extended(has, task.extended):
            continue
        if schedulable:
            fits = True
        else:
            blocked += count
    return fits, blocked
