"""What a submission is checked against: the nodes and the executor's capabilities, what the
nodes could ever hold under a policy, and the refusal of a job that could never start."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.declarations import QueueDecl, gpus_per_flavor
from kiban.domain.jobspec import JobManifest, task_demands
from kiban.executors.base import Capability, Executor, NodeInfo
from kiban.scheduler.feasibility import (
    EmptyCluster,
    Limit,
    empty_cluster,
    never_fits,
    usable_flavors,
)
from kiban.scheduler.quota import QuotaBook
from kiban.scheduler.snapshot import (
    NO_AMOUNTS,
    FlavorView,
    NodeView,
    PendingJob,
    QueueView,
    TopologyRequest,
)
from kiban.services.errors import invalid
from kiban.store.models_nodes import Node


@dataclass(frozen=True)
class ClusterFacts:
    """What submission checks a job against: the nodes and the executor's capabilities.

    What the nodes could ever hold under a policy (``feasibility.EmptyCluster``) is worked out
    on the first submission after the nodes or the policy changed, and kept for the next ones.
    """

    nodes: tuple[NodeInfo, ...] = ()
    capabilities: frozenset[Capability] = field(default_factory=frozenset)
    _under: dict[str, _PolicyFacts] = field(default_factory=dict, compare=False, repr=False)

    @property
    def max_gpus(self) -> int:
        return max((n.gpus for n in self.nodes), default=0)

    def under(self, policy: ClusterPolicy) -> _PolicyFacts:
        """The nodes as if idle and the queues' quotas, under ``policy`` (kept while the policy
        is the same one, or an equal one read again from the store)."""
        kept = self._under.get("last")
        if kept is None or (kept.policy is not policy and kept.policy != policy):
            kept = self._under["last"] = _PolicyFacts.of(self.nodes, policy)
        return kept


@dataclass(frozen=True)
class _PolicyFacts:
    """The nodes as the scheduler would see them idle, and the quotas, under one policy."""

    policy: ClusterPolicy
    cluster: EmptyCluster
    quota: QuotaBook
    queues: dict[str, QueueView]
    flavors: dict[str, FlavorView]

    @classmethod
    def of(cls, nodes: Sequence[NodeInfo], policy: ClusterPolicy) -> _PolicyFacts:
        views = [
            NodeView(
                name=n.name,
                gpus=n.gpus,
                cpu_millis=n.cpu_millis,
                memory=n.memory,
                free_gpu_ids=(),
                free_cpu_millis=0,
                free_memory=0,
                labels=n.labels,
                flavor=policy.flavor_of(n.labels),
                topology=policy.topology_path(n.labels),
                extended=dict(n.extended) if n.extended else NO_AMOUNTS,
            )
            for n in nodes
        ]
        queues = {q.name: _queue_view(q, policy) for q in policy.queues}
        return cls(
            policy,
            empty_cluster(views, policy.topology_levels),
            QuotaBook(queues.values()),
            queues,
            {f.name: f for f in policy.flavor_views()},
        )


def _queue_view(queue: QueueDecl, policy: ClusterPolicy) -> QueueView:
    """A declared queue's quota as the scheduler reads it (nothing in use); with a time-bounded
    allocation, the larger of its own and the allocation's per flavor (what it may ever hold)."""
    nominal = queue.nominal
    allocation = queue.allocation
    if nominal is not None and allocation is not None and allocation.quota is not None:
        granted = gpus_per_flavor(allocation.quota)
        names = [*nominal, *(f for f in granted if f not in nominal)]
        nominal = {f: max(nominal.get(f, 0), granted.get(f, 0)) for f in names}
    return QueueView(
        name=queue.name,
        tenant=queue.tenant,
        nominal=nominal,
        cohort=None if queue.cohort is None else policy.sharing_cohort(queue.cohort),
        borrowing_limit=queue.borrowing,
        lending_limit=queue.lending,
        extended_nominal=queue.extended_nominal,
        scavenger=queue.scavenger,
    )


def check_against_cluster(
    manifest: JobManifest,
    facts: ClusterFacts,
    policy: ClusterPolicy | None = None,
    queue: str | None = None,
) -> None:
    """Refuse a job that could never start, or that needs what the executor cannot do.

    "Never" is the scheduler's own test (``feasibility.never_fits``): on the nodes, all idle,
    of the flavors its queue may use under ``policy``, within the most GPUs the queue could
    ever hold. Without a policy (or a queue the policy lacks), every node counts and no quota.
    """
    spec = manifest.spec
    policy = policy or _NO_POLICY
    under = facts.under(policy)
    view = under.queues.get(queue or spec.queue) or QueueView(name=queue or spec.queue, tenant="")
    job = PendingJob(
        id=manifest.metadata.name,
        queue=view.name,
        priority=0,
        submitted_at=0.0,
        tasks=task_demands(spec, Capability.CONTAINERS in facts.capabilities),
        gang_size=spec.gang_size,
        topology=(
            None
            if spec.topology is None
            else TopologyRequest(spec.topology.level, spec.topology.required)
        ),
    )
    flavors = usable_flavors(view, under.flavors)
    reason = never_fits(job, view, flavors, under.cluster, under.quota)
    # A resource no node advertises yet may come (a device plugin registering, a node joining):
    # the job waits, and its reason names the resource (and a close advertised name).
    if reason is not None and reason.details.get("limit") != Limit.UNADVERTISED:
        raise invalid(_field_at_fault(manifest, reason.details), reason.message)
    if spec.launcher == "torchrun" and Capability.TORCHRUN not in facts.capabilities:
        raise invalid("spec.launcher", "torchrun is not available here (is PyTorch installed?)")
    if spec.launcher == "mpirun" and Capability.MPI not in facts.capabilities:
        raise invalid(
            "spec.launcher",
            "mpirun is not available here (install Open MPI: scripts/ensure-openmpi.sh)",
        )


_NO_POLICY = ClusterPolicy()


def _field_at_fault(manifest: JobManifest, details: Mapping[str, Any]) -> str:
    """The manifest field to change for a job that could never start (the reason's details
    say what limits it, and which task)."""
    limit = Limit(details["limit"])
    if limit in (Limit.FLAVOR, Limit.QUOTA):
        return "spec.queue"
    if limit is Limit.TOPOLOGY:
        return "spec.topology.level"
    names = [t.name for t in manifest.spec.tasks]
    if details.get("task") not in names:
        return "spec.tasks"
    i = names.index(details["task"])
    task = manifest.spec.tasks[i]
    where = f"spec.tasks[{i}]"
    if limit is Limit.SPREAD:
        return f"{where}.maxReplicasPerNode"
    if limit is Limit.NODE_CONSTRAINT:
        return f"{where}.nodeSelector" if task.node_selector else f"{where}.affinity"
    if limit is Limit.NODE_SIZE and "resource" in details:
        return f"{where}.resources.{details['resource']}"
    if limit is Limit.NODE_SIZE:
        largest = details.get("largest") or {}
        for name, asked, have in (
            ("gpu", task.resources.gpu, largest.get("gpus")),
            ("cpu", task.resources.cpu, largest.get("cpu_millis")),
            ("memory", task.resources.memory, largest.get("memory")),
        ):
            if have is not None and asked > have:
                return f"{where}.resources.{name}"
        return f"{where}.resources"
    return f"{where}.replicas"


class KnownFacts:
    """The facts submissions are checked against now: read from the stored nodes and the
    executor, and read again (``refresh``) when the control loop stores changed nodes."""

    def __init__(self, sessions: sessionmaker[Session], executor: Executor) -> None:
        self.sessions = sessions
        self.executor = executor
        self.current = ClusterFacts()

    def refresh(self) -> None:
        """Read the nodes and capabilities again; the same ones keep the facts worked out."""
        with self.sessions() as session:
            rows = session.scalars(select(Node)).all()
            nodes = tuple(
                NodeInfo(
                    n.name,
                    n.gpus,
                    n.cpu_millis,
                    n.memory,
                    dict(n.labels or {}),
                    extended=dict(n.extended or {}),
                )
                for n in rows
            )
        capabilities = self.executor.capabilities
        if nodes == self.current.nodes and capabilities == self.current.capabilities:
            return  # the same: keep what the nodes could hold, worked out already
        self.current = ClusterFacts(nodes=nodes, capabilities=capabilities)
