"""The simulated cluster: nodes, flavors, topology levels and the queues trace jobs go to.

Three sources: ``--nodes N --gpus-per-node G`` (the synthetic shape of
:mod:`kiban.sim.topology`, one flavor, no quotas: each tenant gets its own queue with no quota,
so fair share orders them), the cluster file that ``kiban up --config`` takes (its nodes and
its policy, queues as written), and ``--quotas-from`` (a per-team node-count file such as
Helios' ``philly_vc.csv``): one queue per team with its nodes x GPUs as nominal quota, all in one
cohort so idle quota is lent, and a ``shared`` queue without quota of its own in the same cohort
for the teams the file does not list. Without borrowing (``--no-borrowing``) every team queue
has a borrowing limit of 0: the teams are partitions, as Helios' per-VC clusters are, and only
``shared`` still runs on what they leave idle (it has no GPUs of its own), lent and reclaimed.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from kiban.domain.cluster import ClusterConfig, ClusterPolicy
from kiban.domain.errors import SpecError
from kiban.domain.manifests import load_document
from kiban.scheduler.snapshot import (
    DEFAULT_FLAVOR,
    FlavorView,
    NodeView,
    QueueStrategy,
    QueueView,
    node_view,
)
from kiban.sim.topology import TOPOLOGY_LEVELS, node_name, topology_path
from kiban.sim.traces import TraceError

NODE_CPU_MILLIS_PER_GPU = 28_000  # a BM.GPU.H100.8 host: 224 vCPUs, 2 TiB per 8 GPUs
NODE_MEMORY_PER_GPU = 256 * 2**30
QUOTA_COHORT = "teams"
SHARED_QUEUE = "shared"


@dataclass(frozen=True)
class SimCluster:
    """Idle nodes, flavors and topology levels, and how tenants map to queues.

    ``queues`` empty means one queue per tenant, without quota (``layout`` makes them);
    ``quota_queues`` maps a team to its queue when quotas came from a file (others go to
    ``shared``). ``policy`` supplies priority classes and fair-share settings.
    """

    nodes: tuple[NodeView, ...]
    description: str
    flavors: tuple[FlavorView, ...] = (FlavorView(DEFAULT_FLAVOR),)
    topology_levels: tuple[str, ...] = ()
    queues: tuple[QueueView, ...] = ()
    policy: ClusterPolicy = field(default_factory=ClusterPolicy)
    quota_teams: frozenset[str] | None = None

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def gpus_per_node(self) -> int:
        """The largest node's GPUs: a job larger than that is split into replicas."""
        return max((n.gpus for n in self.nodes), default=0)

    def layout(self, tenants: Iterable[str]) -> tuple[tuple[QueueView, ...], dict[str, str]]:
        """The queues of a run and each tenant's queue."""
        names = sorted(set(tenants))
        if not self.queues:
            queues = tuple(
                QueueView(name=t, tenant=t, strategy=QueueStrategy.BEST_EFFORT_FIFO) for t in names
            )
            return queues, {t: t for t in names}
        if self.quota_teams is not None:
            teams = self.quota_teams
            return self.queues, {t: t if t in teams else SHARED_QUEUE for t in names}
        by_name = {q.name: q.name for q in self.queues}
        by_tenant: dict[str, str] = {}
        for q in self.queues:
            by_tenant.setdefault(q.tenant, q.name)
        fallback = by_name.get("default", self.queues[0].name)
        mapping = {t: by_name.get(t) or by_tenant.get(t) or fallback for t in names}
        return self.queues, mapping


def synthetic(nodes: int, gpus_per_node: int) -> SimCluster:
    """``nodes`` hosts of ``gpus_per_node`` GPUs with the four topology levels of OCI RDMA."""
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError("--nodes and --gpus-per-node must be at least 1")
    views = []
    for i in range(nodes):
        path = topology_path(i)
        views.append(
            node_view(
                name=node_name(i),
                gpus=gpus_per_node,
                cpu_millis=gpus_per_node * NODE_CPU_MILLIS_PER_GPU,
                memory=gpus_per_node * NODE_MEMORY_PER_GPU,
                used_gpu_ids=frozenset(),
                used_cpu_millis=0,
                used_memory=0,
                labels=dict(zip(TOPOLOGY_LEVELS, path, strict=True)),
                topology=path,
            )
        )
    return SimCluster(
        nodes=tuple(views),
        description=f"{nodes} nodes x {gpus_per_node} GPUs = {nodes * gpus_per_node} GPUs",
        topology_levels=TOPOLOGY_LEVELS,
    )


def from_config(config: ClusterConfig, source: str = "cluster file") -> SimCluster:
    """The nodes and queues of a cluster file, as ``kiban up --config`` would schedule them."""
    if not config.nodes:
        raise ValueError(f"{source}: declares no nodes")
    views = tuple(
        node_view(
            name=n.name,
            gpus=n.gpus,
            cpu_millis=n.cpus,
            memory=n.memory,
            used_gpu_ids=frozenset(),
            used_cpu_millis=0,
            used_memory=0,
            labels=n.labels,
            flavor=config.flavor_of(n.labels),
            topology=config.topology_path(n.labels),
        )
        for n in sorted(config.nodes, key=lambda n: n.name)
    )
    queues = tuple(
        QueueView(
            name=q.name,
            tenant=q.tenant,
            nominal=q.nominal,
            strategy=QueueStrategy(q.strategy),
            cohort=q.cohort,
            borrowing_limit=q.borrowing,
            lending_limit=q.lending,
            weight=q.fair_share_weight,
            scavenger=q.scavenger,
        )
        for q in config.queues
    )
    if not queues:
        raise ValueError(f"{source}: declares no queues (queues: []) for the trace's jobs")
    gpus = sum(v.gpus for v in views)
    return SimCluster(
        nodes=views,
        description=f"{source}: {len(views)} nodes, {gpus} GPUs, {len(queues)} queue(s)",
        flavors=config.flavor_views(),
        topology_levels=config.topology_levels,
        queues=queues,
        policy=config,
    )


def load_cluster_file(path: Path) -> SimCluster:
    """Read and validate a cluster file; errors name the file and the field."""
    from kiban.domain.cluster import parse_cluster_config

    try:
        config = parse_cluster_config(load_document(path.read_text()))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except SpecError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return from_config(config, source=str(path))


def read_quotas(path: Path) -> dict[str, int]:
    """``team, nodes`` rows after a header (Helios' ``vc,node num``): nodes per team."""
    quotas: dict[str, int] = {}
    try:
        with path.open(newline="") as f:
            rows = list(enumerate(csv.reader(f), start=1))
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
    rows = [(line, row) for line, row in rows if row and any(c.strip() for c in row)]
    if len(rows) < 2:
        raise TraceError(f"{path}: expected a header and one row per team (team, nodes)")
    header = [c.strip() for c in rows[0][1]]
    for line, row in rows[1:]:
        if len(row) < 2:
            raise TraceError(f"{path}, line {line}: expected team, nodes")
        team, text = row[0].strip(), row[1].strip()
        try:
            count = int(text)
        except ValueError:
            count = -1
        if count < 0:
            raise TraceError(
                f"{path}, line {line}, column {header[1] if len(header) > 1 else 2}: "
                f"not a node count (got {text!r})"
            )
        if not team:
            raise TraceError(f"{path}, line {line}, column {header[0]}: empty team name")
        if team in quotas:
            raise TraceError(f"{path}, line {line}: team {team} is listed twice")
        quotas[team] = count
    return quotas


def scaled_quotas(quotas: Mapping[str, int], total_gpus: int) -> dict[str, int]:
    """Each team's GPUs when its node count is scaled in proportion to a cluster of
    ``total_gpus``: ``nodes / all teams' nodes x total_gpus``, rounded down, and the GPUs left
    by rounding given one each to the largest remainders (ties by team name), so that the
    quotas add up to the cluster exactly."""
    listed = sum(quotas.values())
    if listed <= 0:
        raise ValueError("--scale-quotas: the quota file's teams have no nodes to scale")
    if total_gpus < 1:
        raise ValueError("--scale-quotas: the cluster has no GPUs to scale the quotas to")
    exact = {team: nodes * total_gpus / listed for team, nodes in quotas.items()}
    gpus = {team: math.floor(share) for team, share in exact.items()}
    left = total_gpus - sum(gpus.values())
    by_remainder = sorted(exact, key=lambda team: (-(exact[team] - gpus[team]), team))
    for team in by_remainder[:left]:
        gpus[team] += 1
    return gpus


def with_quotas(
    cluster: SimCluster,
    quotas: Mapping[str, int],
    gpus_per_node: int,
    *,
    borrowing: bool = True,
    scale: bool = False,
) -> SimCluster:
    """Queues per team with ``nodes x gpus_per_node`` nominal GPUs, in one cohort, plus
    ``shared`` (no quota of its own) for teams not listed; the cluster must have one flavor.
    ``borrowing`` False: the teams may not borrow (a borrowing limit of 0), only lend.
    ``scale``: the node counts are scaled to the cluster's GPUs (``scaled_quotas``)."""
    if len(cluster.flavors) != 1:
        raise ValueError("--quotas-from needs a cluster with one flavor")
    flavor = cluster.flavors[0].name
    if scale:
        team_gpus = scaled_quotas(quotas, cluster.total_gpus)
    else:
        team_gpus = {team: nodes * gpus_per_node for team, nodes in quotas.items()}
    queues = [
        QueueView(
            name=team,
            tenant=team,
            nominal={flavor: gpus},
            strategy=QueueStrategy.BEST_EFFORT_FIFO,
            cohort=QUOTA_COHORT,
            borrowing_limit={} if borrowing else {flavor: 0},
        )
        for team, gpus in sorted(team_gpus.items())
    ]
    queues.append(
        QueueView(
            name=SHARED_QUEUE,
            tenant=SHARED_QUEUE,
            nominal={flavor: 0},
            strategy=QueueStrategy.BEST_EFFORT_FIFO,
            cohort=QUOTA_COHORT,
        )
    )
    quota_gpus = sum(team_gpus.values())
    return replace(
        cluster,
        queues=tuple(queues),
        quota_teams=frozenset(quotas),
        description=(
            f"{cluster.description}; {len(quotas)} team quotas ({quota_gpus} GPUs"
            f"{', scaled to the cluster' if scale else ''}) in one "
            f"cohort, {'borrowing allowed' if borrowing else 'no borrowing (partitions)'}, "
            f"others in queue {SHARED_QUEUE}"
        ),
    )


def alone_gpus(cluster: SimCluster, queue: QueueView, tenants: int) -> int:
    """GPUs a tenant would have to itself: its queue's nominal quota, else an equal share."""
    nominal = sum((queue.nominal or {}).values())
    if nominal > 0:
        return nominal
    return max(1, math.ceil(cluster.total_gpus / max(tenants, 1)))
