"""Could a job ever start: on these nodes, all of them idle, under this policy?

One definition for submission (a job that never could is refused, naming why) and for the core
(a waiting job that no longer could, after nodes left or the policy changed, waits as
``Unschedulable`` and does not hold up its queue). A job could start on a flavor its queue may
use when all of these hold, on the flavor's nodes whether or not they take work now (a cordoned
or unhealthy node may come back; a node that left the cluster does not count):

- quota: its GPUs are within the most its queue could ever hold of the flavor (nominal quota,
  plus what it may borrow from its cohort: ``QuotaBook.ceiling``);
- each task's share of the gang fits the nodes its node constraint admits, each node holding
  as many replicas as its GPUs, CPUs and memory allow, and no more than ``max_per_node``;
- the gang's GPUs, CPUs and memory together are within the flavor's;
- with a required topology level, all of that within one domain of the level.

These are exact for a job of one task (replicas are alike, so a node's share does not depend
on the others'); for several tasks they are necessary, not sufficient: a job they pass may
still never pack, and waits as any job that does not fit now. Counts are memoized per flavor
and shape, so a submission or a cycle pays for a shape once while the nodes stay the same.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from kiban.scheduler import units
from kiban.scheduler.node_match import NodeConstraint
from kiban.scheduler.quota import QuotaBook
from kiban.scheduler.reasons import (
    PendingReason,
    ReasonCode,
    counted,
    cpus,
    gpus,
    replica_size,
    spread_phrase,
)
from kiban.scheduler.snapshot import (
    NO_EXTENDED,
    Extended,
    FlavorView,
    NodeView,
    PendingJob,
    QueueView,
    TaskDemand,
    extended_of,
)


class Limit(StrEnum):
    """What a job can never get: the part of the job or the policy to change."""

    FLAVOR = "flavor"  # its queue may use no flavor
    QUOTA = "quota"  # more GPUs than its queue could ever hold
    NODE_SIZE = "node-size"  # no node could hold one replica
    NODE_CONSTRAINT = "node-constraint"  # no node its constraint admits could hold one
    SPREAD = "spread"  # too few nodes for its replicas per node
    CAPACITY = "capacity"  # more than the flavor's nodes hold together
    TOPOLOGY = "topology"  # no domain of its topology level could hold the gang
    UNADVERTISED = "unadvertised"  # an extended resource no node of the cluster advertises


MAX_REMEMBERED = 65536
"""Verdicts kept per set of nodes; past it they are forgotten and worked out again."""
_UNBOUNDED = 1 << 40  # replicas a node could hold of a task that asks for none of a resource
NodeSize = tuple[int, int, int, Extended]  # GPUs, CPU millis, memory, extended resources


def usable_flavors(queue: QueueView, flavors: Mapping[str, FlavorView]) -> tuple[str, ...]:
    """The flavors a queue may use, in the order they are tried: those of its nominal quota (all
    flavors when it has none) that are not restricted to other queues."""
    names = list(queue.nominal) if queue.nominal is not None else list(flavors)
    usable = []
    for name in names:
        view = flavors.get(name)
        if view is not None and (view.queues is None or queue.name in view.queues):
            usable.append(name)
    return tuple(usable)


def per_node(task: TaskDemand, size: NodeSize) -> int:
    """How many of the task's replicas an idle node of this size could hold."""
    node_gpus, node_cpu, node_memory, node_extended = size
    fits = min(
        node_gpus // task.gpu if task.gpu > 0 else _UNBOUNDED,
        node_cpu // task.cpu_millis if task.cpu_millis > 0 else _UNBOUNDED,
        node_memory // task.memory if task.memory > 0 else _UNBOUNDED,
    )
    if task.extended:
        has = dict(node_extended)
        for name, amount in task.extended:
            fits = min(fits, has.get(name, 0) // amount)
    return fits if task.max_per_node is None else min(fits, task.max_per_node)


@dataclass(slots=True)
class _Flavor:
    """One flavor's nodes as if idle: how many of each size, their sum, and (worked out when a
    job first asks for a topology level) each topology domain's sizes."""

    nodes: Collection[NodeView]
    sizes: Counter[NodeSize]
    total: tuple[int, int, int] = (0, 0, 0)
    domains: list[dict[tuple[str, ...], Counter[NodeSize]]] | None = None

    def __post_init__(self) -> None:
        self.total = (
            sum(size[0] * count for size, count in self.sizes.items()),
            sum(size[1] * count for size, count in self.sizes.items()),
            sum(size[2] * count for size, count in self.sizes.items()),
        )

    def domain_sizes(self) -> list[dict[tuple[str, ...], Counter[NodeSize]]]:
        if self.domains is None:
            domains: list[dict[tuple[str, ...], Counter[NodeSize]]] = []
            for node in self.nodes:
                size = _size(node)
                for level in range(len(node.topology)):
                    while len(domains) <= level:
                        domains.append({})
                    domain = node.topology[: level + 1]
                    domains[level].setdefault(domain, Counter())[size] += 1
            self.domains = domains
        return self.domains


_TaskKey = tuple[int, int, int, int | None, NodeConstraint | None, Extended]


def _key(task: TaskDemand) -> _TaskKey:
    return (task.gpu, task.cpu_millis, task.memory, task.max_per_node, task.nodes, task.extended)


def _size(node: NodeView) -> NodeSize:
    extended = extended_of(node.extended) if node.extended else NO_EXTENDED
    return (node.gpus, node.cpu_millis, node.memory, extended)


def empty_cluster(nodes: Iterable[NodeView], levels: Sequence[str] = ()) -> EmptyCluster:
    """The nodes (of each flavor; nodes of no flavor serve no queue) as if idle."""
    by_flavor: dict[str, list[NodeView]] = {}
    for node in nodes:
        if node.flavor is not None:
            by_flavor.setdefault(node.flavor, []).append(node)
    return EmptyCluster(
        {
            flavor: (members, Counter(_size(n) for n in members))
            for flavor, members in by_flavor.items()
        },
        levels,
    )


class EmptyCluster:
    """The nodes of each flavor as if idle: what they could ever hold. Made from each flavor's
    nodes and how many there are of each size (a capacity index keeps both, so the core makes
    one without visiting every node); answers are memoized per task shape."""

    def __init__(
        self,
        flavors: Mapping[str, tuple[Collection[NodeView], Counter[NodeSize]]],
        levels: Sequence[str] = (),
    ) -> None:
        self.levels = tuple(levels)
        self._flavors = {name: _Flavor(nodes, sizes) for name, (nodes, sizes) in flavors.items()}
        self._verdicts: dict[str, tuple[Hashable, PendingReason | None]] = {}
        self._slots: dict[tuple[str, _TaskKey], int] = {}
        self._sized: dict[tuple[str, NodeConstraint | None], Counter[NodeSize]] = {}
        self._domain_slots: dict[tuple[str, int, _TaskKey], dict[tuple[str, ...], int]] = {}
        self._advertised: dict[str, int] | None = None

    def advertised(self) -> dict[str, int]:
        """Each extended resource any node of any flavor advertises, with the most one node
        has (worked out once: most clusters advertise none)."""
        if self._advertised is None:
            most: dict[str, int] = {}
            for found in self._flavors.values():
                for size in found.sizes:
                    for name, amount in size[3]:
                        most[name] = max(most.get(name, 0), amount)
            self._advertised = most
        return self._advertised

    def remembered(
        self, job_id: str, asked: Hashable, verdict: Callable[[], PendingReason | None]
    ) -> PendingReason | None:
        """``verdict()`` for a job on these nodes, worked out again only when what it depends
        on besides the nodes (``asked``: the job's shape, its queue's flavors and quota
        ceilings) is not what it was the last time: a waiting job is judged once, not every
        cycle."""
        known = self._verdicts.get(job_id)
        if known is not None and known[0] == asked:
            return known[1]
        if len(self._verdicts) >= MAX_REMEMBERED:
            self._verdicts.clear()
        found = verdict()
        self._verdicts[job_id] = (asked, found)
        return found

    def node_count(self, flavor: str) -> int:
        found = self._flavors.get(flavor)
        return 0 if found is None else len(found.nodes)

    def totals(self, flavor: str) -> tuple[int, int, int]:
        """GPUs, CPU millis and memory of all the flavor's nodes."""
        found = self._flavors.get(flavor)
        return (0, 0, 0) if found is None else found.total

    def sizes(self, flavor: str, nodes: NodeConstraint | None = None) -> Counter[NodeSize]:
        """How many of the flavor's nodes (of those ``nodes`` admits) have each size."""
        found = self._flavors.get(flavor)
        if found is None:
            return Counter()
        if nodes is None:
            return found.sizes
        key = (flavor, nodes)
        sized = self._sized.get(key)
        if sized is None:
            sized = Counter(_size(n) for n in found.nodes if nodes.allows(n.name, n.labels))
            self._sized[key] = sized
        return sized

    def slots(self, flavor: str, task: TaskDemand) -> int:
        """How many of the task's replicas the flavor's nodes could hold together when idle."""
        key = (flavor, _key(task))
        known = self._slots.get(key)
        if known is None:
            sizes = self.sizes(flavor, task.nodes)
            known = self._slots[key] = sum(
                count * per_node(task, size) for size, count in sizes.items()
            )
        return known

    def domain_slots(self, flavor: str, level: int, task: TaskDemand) -> dict[tuple[str, ...], int]:
        """The same per domain of a topology level (domains holding none left out)."""
        key = (flavor, level, _key(task))
        known = self._domain_slots.get(key)
        if known is not None:
            return known
        found = self._flavors.get(flavor)
        result: dict[tuple[str, ...], int] = {}
        if found is not None and level < len(found.domain_sizes()):
            if task.nodes is None:
                for domain, sizes in found.domain_sizes()[level].items():
                    held = sum(count * per_node(task, size) for size, count in sizes.items())
                    if held:
                        result[domain] = held
            else:
                for node in found.nodes:
                    if len(node.topology) <= level or not task.nodes.allows(node.name, node.labels):
                        continue
                    held = per_node(task, _size(node))
                    if held:
                        domain = node.topology[: level + 1]
                        result[domain] = result.get(domain, 0) + held
        self._domain_slots[key] = result
        return result

    def domain_sizes(self, flavor: str, level: int) -> dict[tuple[str, ...], Counter[NodeSize]]:
        found = self._flavors.get(flavor)
        if found is None or level >= len(found.domain_sizes()):
            return {}
        return found.domain_sizes()[level]


@dataclass(frozen=True, slots=True)
class _Shortfall:
    """Why a job can never start on one flavor: what limits it, what it needs and what the
    flavor has, the task at fault (if one is), and the numbers."""

    limit: Limit
    needs: str
    has: str
    task: str | None = None
    details: Mapping[str, object] = field(default_factory=dict)


def never_fits(
    job: PendingJob,
    queue: QueueView,
    flavors: Sequence[str],
    cluster: EmptyCluster,
    quota: QuotaBook,
) -> PendingReason | None:
    """Why the job could never start on any of ``flavors`` (its queue's, in order), even with
    every node idle (an ``Unschedulable`` reason), or None if it could on one of them."""
    if not flavors:
        return PendingReason(
            ReasonCode.UNSCHEDULABLE,
            f"can never start: queue {queue.name} may use no flavor",
            {"limit": Limit.FLAVOR.value, "queue": queue.name},
        )
    shortfalls: list[tuple[str, _Shortfall]] = []
    for flavor in flavors:
        shortfall = _shortfall(job, queue, flavor, cluster, quota)
        if shortfall is None:
            return None
        shortfalls.append((flavor, shortfall))
    return _reason(shortfalls)


def _shortfall(
    job: PendingJob, queue: QueueView, flavor: str, cluster: EmptyCluster, quota: QuotaBook
) -> _Shortfall | None:
    ceiling = quota.ceiling(queue.name, flavor) if queue.name in quota.queues else None
    if ceiling is not None and job.total_gpus > ceiling:
        nominal = quota.nominal(queue.name, flavor) or 0
        borrowed = ""
        if ceiling > nominal:
            borrowed = f" ({nominal} its own, {ceiling - nominal} borrowed)"
        return _Shortfall(
            Limit.QUOTA,
            f"needs {gpus(job.total_gpus, flavor)}",
            f"queue {queue.name} can never hold more than {ceiling}{borrowed}",
            details={
                "queue": queue.name,
                "needed_gpus": job.total_gpus,
                "ceiling_gpus": ceiling,
                "nominal_gpus": nominal,
            },
        )
    if queue.extended_nominal and queue.name in quota.queues:
        limits = quota.extended_nominal(queue.name, flavor)
        for name, amount in job.total_extended:
            limit = limits.get(name)
            if limit is not None and amount > limit:
                return _Shortfall(
                    Limit.QUOTA,
                    f"needs {amount} {name}{_of(flavor)}",
                    f"queue {queue.name} can never hold more than {limit}",
                    details={"queue": queue.name, "resource": name, "needed": amount},
                )
    left = job.gang_size
    takes: list[tuple[TaskDemand, int]] = []
    for task in job.tasks:
        take = min(left, task.replicas)
        left -= take
        if take:
            takes.append((task, take))
    for task, take in takes:
        shortfall = _task_shortfall(task, take, flavor, cluster)
        if shortfall is not None:
            return shortfall
    if len(takes) > 1:  # one task that fits the nodes fits their sum
        shortfall = _sum_shortfall(takes, flavor, cluster)
        if shortfall is not None:
            return shortfall
    request = job.topology
    if request is not None and request.required:
        return _topology_shortfall(job, takes, request.level, flavor, cluster)
    return None


def _sum_shortfall(
    takes: list[tuple[TaskDemand, int]], flavor: str, cluster: EmptyCluster
) -> _Shortfall | None:
    """The gang's GPUs, CPUs or memory together beyond all the flavor's nodes have."""
    needed = [sum(take * _amount(task, i) for task, take in takes) for i in range(3)]
    have = cluster.totals(flavor)
    for i, what in enumerate(("GPUs", "CPUs", "memory")):
        if needed[i] > have[i]:
            return _Shortfall(
                Limit.CAPACITY,
                f"needs {_total(i, needed[i])} together",
                f"the {counted(cluster.node_count(flavor), 'node')}{_of(flavor)} have "
                f"{_total(i, have[i])} in all",
                details={"resource": what, "needed": needed[i], "total": have[i]},
            )
    return None


def _amount(task: TaskDemand, i: int) -> int:
    return (task.gpu, task.cpu_millis, task.memory)[i]


def _total(i: int, amount: int) -> str:
    if i == 0:
        return counted(amount, "GPU")
    if i == 1:
        return cpus(amount)
    return f"{units.size(amount)} of memory"


def _of(flavor: str) -> str:
    return "" if flavor == "default" else f" of flavor {flavor}"


def _task_shortfall(
    task: TaskDemand, take: int, flavor: str, cluster: EmptyCluster
) -> _Shortfall | None:
    held = cluster.slots(flavor, task)
    if held >= take:
        return None
    if task.extended:
        unadvertised = _unadvertised(task, cluster)
        if unadvertised is not None:
            return unadvertised
    details: dict[str, object] = {"needed_replicas": take, "replicas_the_nodes_hold": held}
    if task.nodes is not None and task.nodes.excluded:
        details["excluded_nodes"] = sorted(task.nodes.excluded)
    what = f"task {task.name} ({replica_size(task)})"
    if held == 0:
        if task.nodes is not None and any(per_node(task, size) for size in cluster.sizes(flavor)):
            matching = sum(cluster.sizes(flavor, task.nodes).values())
            has = f"no node{_of(flavor)} matches"
            if matching:
                nodes = f"{counted(matching, 'node')}{_of(flavor)}"
                has = f"none of the {nodes} that match could hold one"
            return _Shortfall(
                Limit.NODE_CONSTRAINT,
                f"needs a node matching {task.nodes} for a replica of {what}",
                has,
                task.name,
                {**details, "nodes": str(task.nodes), "matching_nodes": matching},
            )
        largest = _largest(cluster.sizes(flavor))
        if task.extended and cluster.node_count(flavor):
            short = _extended_short(task, flavor, cluster)
            if short is not None:
                return _Shortfall(
                    Limit.NODE_SIZE,
                    f"needs a node that can hold a replica of {what}",
                    short[0],
                    task.name,
                    {**details, **short[1]},
                )
        has = (
            f"the largest{_of(flavor)} node has {_largest_text(largest)}"
            if cluster.node_count(flavor)
            else f"there is no node{_of(flavor)}"
        )
        return _Shortfall(
            Limit.NODE_SIZE,
            f"needs a node that can hold a replica of {what}",
            has,
            task.name,
            {
                **details,
                "largest": {"gpus": largest[0], "cpu_millis": largest[1], "memory": largest[2]},
            },
        )
    limit = task.max_per_node
    if limit is not None:
        unlimited = cluster.slots(flavor, _unlimited(task))
        if unlimited >= take:
            nodes_needed = -(-take // limit)
            with_room = sum(
                count
                for size, count in cluster.sizes(flavor, task.nodes).items()
                if per_node(task, size)
            )
            return _Shortfall(
                Limit.SPREAD,
                f"needs {spread_phrase(nodes_needed, task, limit)} (task {task.name})",
                f"only {counted(with_room, 'such node')} exist{'s' if with_room == 1 else ''}"
                f"{_of(flavor)}",
                task.name,
                {
                    **details,
                    "max_replicas_per_node": limit,
                    "nodes_needed": nodes_needed,
                    "nodes_with_room": with_room,
                },
            )
    return _Shortfall(
        Limit.CAPACITY,
        f"needs {counted(take, 'replica')} of {what} together",
        f"the {counted(sum(cluster.sizes(flavor, task.nodes).values()), 'node')}{_of(flavor)}"
        f"{' that match ' + str(task.nodes) if task.nodes is not None else ''} could hold "
        f"{held} even when idle",
        task.name,
        details,
    )


def _unlimited(task: TaskDemand) -> TaskDemand:
    return TaskDemand(
        task.name,
        task.replicas,
        task.gpu,
        task.cpu_millis,
        task.memory,
        task.nodes,
        task.prefers,
        extended=task.extended,
    )


def _unadvertised(task: TaskDemand, cluster: EmptyCluster) -> _Shortfall | None:
    """The task asks for an extended resource that no node of the cluster advertises (None:
    every one it asks for is advertised somewhere); a close name that is advertised is offered
    as the likely one meant."""
    advertised = cluster.advertised()
    for name, amount in task.extended:
        if name in advertised:
            continue
        close = difflib.get_close_matches(name, sorted(advertised), n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        details: dict[str, object] = {"resource": name, "needed": amount}
        if close:
            details["did_you_mean"] = close[0]
        return _Shortfall(
            Limit.UNADVERTISED,
            f"task {task.name} needs {amount} {name} per replica",
            f"no node advertises {name}{hint}",
            task.name,
            details,
        )
    return None


def _extended_short(
    task: TaskDemand, flavor: str, cluster: EmptyCluster
) -> tuple[str, dict[str, object]] | None:
    """The first extended resource of which no node of the flavor has enough for one replica
    (what the most any node has, and the numbers), or None if every one fits some node."""
    sizes = cluster.sizes(flavor, task.nodes)
    for name, amount in task.extended:
        most = max((dict(size[3]).get(name, 0) for size in sizes), default=0)
        if most < amount:
            has = (
                f"no node{_of(flavor)} advertises {name}"
                if not most
                else f"the most any node{_of(flavor)} has is {most} {name}"
            )
            return has, {"resource": name, "needed": amount, "most_on_a_node": most}
    return None


def _largest(sizes: Counter[NodeSize]) -> tuple[int, int, int]:
    """The most GPUs, CPUs and memory of any node (each on its own)."""
    if not sizes:
        return (0, 0, 0)
    return (max(s[0] for s in sizes), max(s[1] for s in sizes), max(s[2] for s in sizes))


def _largest_text(largest: tuple[int, int, int]) -> str:
    return (
        f"{counted(largest[0], 'GPU')}, {cpus(largest[1])} and {units.size(largest[2])} of memory"
    )


def _topology_shortfall(
    job: PendingJob,
    takes: list[tuple[TaskDemand, int]],
    level_name: str,
    flavor: str,
    cluster: EmptyCluster,
) -> _Shortfall | None:
    needs = f"needs the gang ({gpus(sum(t.gpu * n for t, n in takes), flavor)}) in one {level_name}"
    if level_name not in cluster.levels:
        return _Shortfall(
            Limit.TOPOLOGY,
            needs,
            f"the cluster has no topology level {level_name}",
            details={"level": level_name},
        )
    level = cluster.levels.index(level_name)
    domains = cluster.domain_sizes(flavor, level)
    per_task = [(cluster.domain_slots(flavor, level, task), take) for task, take in takes]
    gpus_needed = sum(task.gpu * take for task, take in takes)
    best = 0
    for domain, sizes in domains.items():
        holds = all(slots.get(domain, 0) >= take for slots, take in per_task)
        if holds and sum(size[0] * count for size, count in sizes.items()) >= gpus_needed:
            return None
        best = max(best, min(slots.get(domain, 0) for slots, _take in per_task))
    replicas = sum(take for _task, take in takes)
    return _Shortfall(
        Limit.TOPOLOGY,
        needs,
        f"no {level_name}{_of(flavor)} could hold it even when idle (at most {best} of its "
        f"{replicas} replicas fit in one)",
        details={"level": level_name, "domains": len(domains), "most_replicas_in_one": best},
    )


def _reason(shortfalls: list[tuple[str, _Shortfall]]) -> PendingReason:
    """One reason for all the queue's flavors: what the job needs, then what each flavor has
    (the needs said once when every flavor's are the same)."""
    first = shortfalls[0][1]
    if all(s.needs == first.needs for _f, s in shortfalls):
        message = f"{first.needs}; " + "; ".join(s.has for _f, s in shortfalls)
    else:
        message = "; ".join(f"{s.needs}, but {s.has}" for _f, s in shortfalls)
    details: dict[str, object] = {
        "limit": first.limit.value,
        "flavor": shortfalls[0][0],
        **first.details,
    }
    if first.task is not None:
        details["task"] = first.task
    if len(shortfalls) > 1:
        details["flavors"] = {flavor: s.limit.value for flavor, s in shortfalls}
    return PendingReason(ReasonCode.UNSCHEDULABLE, f"can never start: {message}", details)
