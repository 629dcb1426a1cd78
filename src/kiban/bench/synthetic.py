"""The synthetic cluster and workload of ``kiban bench scheduler``: nodes, queues, jobs.

**Cluster.** ``nodes`` bare-metal hosts ``node-00000``.. of ``gpus_per_node`` GPUs of one flavor,
``h100`` (the largest H100 superclusters are homogeneous: 16,384 hosts x 8 GPUs = 131,072 GPUs,
the size OCI gives for its three-tier Clos cluster network, blogs.oracle.com "First principles:
zettascale OCI superclusters"; a second flavor would only split the same cluster). CPU and
memory are those of a BM.GPU.H100.8 host per 8 GPUs (224 vCPUs, 2 TiB) and never bind: jobs
ask 16 CPUs and 128 GiB per GPU.

Each node carries the four network-locality labels of OCI RDMA nodes and its ``topology`` path,
in the shape :mod:`kiban.sim.topology` gives (shared with ``kiban sim``): 8 hosts per local
block, 16 local blocks per network block, 16 network blocks per island, so the full cluster is
8 islands.

**Running work.** ``busy`` of the GPUs are held by running jobs, drawn from the trace weighted
by duration (what runs at a random instant is length-biased), each ``U(0, duration)`` into its
run. They are placed by filling the cluster (multi-node jobs on whole nodes walked in a shuffled
order of local blocks, smaller ones best-fit) and then ending jobs at random until ``busy`` is
reached: the free capacity is scattered in holes, as on a cluster that has been running a while.

**Queues and cohorts** are shaped like Kueue's scheduler performance baseline
(kubernetes-sigs/kueue, test/performance/scheduler/configs/baseline/generator.yaml: 5 cohorts of
6 ClusterQueues, each with the same nominal quota and a borrowing limit of 5 times it, workloads
in three classes whose priority grows with their size: small 50, medium 100, large 200,
``withinClusterQueue: LowerPriority``; its queues use the API's default strategy,
BestEffortFIFO). Here the nominal quotas add up to the cluster's GPUs, queue ``i`` is in cohort
``i mod cohorts``, each queue is its own tenant, and running jobs are spread over the queues in
proportion to their quota times ``U(0.75, 1.25)``, so some queues already borrow.

**Waiting jobs** are drawn uniformly from the rows of the Philly trace (``philly_jobs_sia.csv``
in ``../shared/traces``; see its README), so their GPU counts (1 to 128) and durations keep the
trace's joint distribution. A job of ``g`` GPUs runs as ``g / p`` replicas of ``p`` GPUs, ``p``
the largest divisor of ``g`` that fits a node (so 16 GPUs: 2 x 8; 12 GPUs: 2 x 6), all of them
one gang. Its priority class follows Kueue's classes (1 GPU small, up to a node medium, more
large) and may preempt lower priorities; its ``max_runtime`` is its trace duration; a multi-node
job prefers (does not require) the smallest topology level whose domain has hosts enough. They
arrive 100 ms apart (the baseline's creation interval for small workloads) and all wait when
the first cycle runs, a backlog.

Everything random comes from ``random.Random`` seeded by ``seed`` and a purpose, so the cluster
and the jobs are the same whatever the number of queues; only their queue assignment differs.
"""

from __future__ import annotations

import bisect
import csv
import itertools
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kiban.bench.loadgen import BenchError
from kiban.scheduler.snapshot import (
    FlavorView,
    NodeView,
    PendingJob,
    QueueStrategy,
    QueueView,
    RunningJob,
    RunningReplica,
    Snapshot,
    TaskDemand,
    node_view,
)
from kiban.sim.topology import (
    HOSTS_PER_LOCAL_BLOCK,
    TOPOLOGY_LEVELS,
    node_name,
    split_gpus,
    topology_path,
    topology_request,
)

FLAVOR = "h100"
CPU_MILLIS_PER_GPU = 16_000
MEMORY_PER_GPU = 128 * 2**30
NODE_CPU_MILLIS_PER_GPU = 28_000  # 224 vCPUs per 8 GPUs
NODE_MEMORY_PER_GPU = 256 * 2**30  # 2 TiB per 8 GPUs

PRIORITY_SMALL = 50
PRIORITY_MEDIUM = 100
PRIORITY_LARGE = 200
BORROWING_RATIO = 5  # Kueue's baseline: borrowingLimit 100 for a nominalQuota of 20
QUEUE_STRATEGY = QueueStrategy.BEST_EFFORT_FIFO
ARRIVAL_INTERVAL_S = 0.1
START = 1_700_000_000.0
"""The simulated clock at the first cycle (seconds since the epoch, late 2023)."""

TRACE_FILE = "philly_jobs_sia.csv"
TRACES_ENV = "KIBAN_TRACES"


# -- the trace -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TraceJob:
    """One row of the Philly trace: how many GPUs a job used and for how long."""

    gpus: int
    duration_s: float


def repo_traces_dir() -> Path:
    """``../shared/traces`` beside the repository this module is in (a source checkout)."""
    return Path(__file__).resolve().parents[3].parent / "shared" / "traces"


def find_trace(traces_dir: Path | None = None) -> Path:
    """The Philly trace file: in ``traces_dir``, else ``$KIBAN_TRACES``, else ``../shared/traces``.

    The last is looked for beside the repository and beside the working directory. No fallback:
    without the real trace there is no benchmark.
    """
    if traces_dir is not None:
        candidates = [traces_dir]
    elif os.environ.get(TRACES_ENV):
        candidates = [Path(os.environ[TRACES_ENV])]
    else:
        candidates = [repo_traces_dir(), Path.cwd().parent / "shared" / "traces"]
    for folder in candidates:
        if (folder / TRACE_FILE).is_file():
            return folder / TRACE_FILE
    tried = ", ".join(str(folder / TRACE_FILE) for folder in dict.fromkeys(candidates))
    raise BenchError(
        f"the Philly trace is not there ({tried}); set {TRACES_ENV} (or --traces) to the "
        f"folder that holds {TRACE_FILE} (see ../shared/traces/README.md)"
    )


def load_philly(path: Path) -> list[TraceJob]:
    """The trace's jobs that used GPUs, with their GPU count and run time, in file order."""
    jobs: list[TraceJob] = []
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = {"num_gpus", "duration"} - set(reader.fieldnames or ())
            if missing:
                raise BenchError(f"{path}: no column {', '.join(sorted(missing))}")
            for line, row in enumerate(reader, start=2):
                try:
                    gpus = int(row["num_gpus"])
                    duration = float(row["duration"])
                except (TypeError, ValueError):
                    raise BenchError(f"{path}, line {line}: not a job row: {row}") from None
                if gpus >= 1 and duration > 0:
                    jobs.append(TraceJob(gpus, duration))
    except OSError as exc:
        raise BenchError(f"cannot read the trace: {exc}") from None
    if not jobs:
        raise BenchError(f"{path}: no jobs with GPUs")
    return jobs


# -- shapes ----------------------------------------------------------------------------------


def priority_of(gpus: int, gpus_per_node: int) -> int:
    """Kueue's baseline classes: one GPU small, up to a node medium, more large."""
    if gpus <= 1:
        return PRIORITY_SMALL
    return PRIORITY_MEDIUM if gpus <= gpus_per_node else PRIORITY_LARGE


# -- the cluster and its running work ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PlacedJob:
    """A running job before it has a queue: its size, how far into its run, where it is."""

    gpus: int
    duration_s: float
    elapsed_s: float
    replicas: tuple[RunningReplica, ...]


@dataclass(frozen=True)
class Cluster:
    """The nodes (with the running jobs' GPUs taken) and the running jobs, queue-less."""

    gpus_per_node: int
    nodes: tuple[NodeView, ...]
    placed: tuple[PlacedJob, ...]

    @property
    def total_gpus(self) -> int:
        return len(self.nodes) * self.gpus_per_node

    @property
    def busy_gpus(self) -> int:
        return sum(p.gpus for p in self.placed)


class _Packer:
    """Free GPU ids per node; whole nodes from a cursor, partial replicas best-fit."""

    def __init__(self, nodes: int, gpus_per_node: int, rng: random.Random) -> None:
        self.gpn = gpus_per_node
        blocks = [
            list(range(start, min(start + HOSTS_PER_LOCAL_BLOCK, nodes)))
            for start in range(0, nodes, HOSTS_PER_LOCAL_BLOCK)
        ]
        rng.shuffle(blocks)
        self.order = [i for block in blocks for i in block]
        self.cursor = 0
        self.free: list[list[int]] = [list(range(gpus_per_node)) for _ in range(nodes)]
        # Opened nodes with some GPUs free, by free count (a node is in at most one bucket).
        self.partial: dict[int, dict[int, None]] = {f: {} for f in range(1, gpus_per_node)}

    def place(self, replicas: int, per: int) -> list[tuple[int, tuple[int, ...]]] | None:
        if per == self.gpn:
            if self.cursor + replicas > len(self.order):
                return None
            taken = self.order[self.cursor : self.cursor + replicas]
            self.cursor += replicas
            return [(i, self._take(i, per)) for i in taken]
        spots: list[tuple[int, tuple[int, ...]]] = []
        for _ in range(replicas):
            node = self._best_fit(per)
            if node is None:
                for i, ids in spots:
                    self.give(i, ids)
                return None
            spots.append((node, self._take(node, per)))
        return spots

    def _best_fit(self, per: int) -> int | None:
        for free in range(per, self.gpn):
            if self.partial[free]:
                return next(reversed(self.partial[free]))
        if self.cursor < len(self.order):
            self.cursor += 1
            return self.order[self.cursor - 1]
        return None

    def _take(self, node: int, gpus: int) -> tuple[int, ...]:
        ids = self.free[node]
        self._unbucket(node)
        taken, self.free[node] = tuple(ids[:gpus]), ids[gpus:]
        self._bucket(node)
        return taken

    def give(self, node: int, ids: tuple[int, ...]) -> None:
        self._unbucket(node)
        self.free[node] = sorted([*self.free[node], *ids])
        self._bucket(node)

    def _unbucket(self, node: int) -> None:
        free = len(self.free[node])
        if 0 < free < self.gpn:
            del self.partial[free][node]

    def _bucket(self, node: int) -> None:
        free = len(self.free[node])
        if 0 < free < self.gpn:
            self.partial[free][node] = None


def build_cluster(
    trace: Sequence[TraceJob], *, nodes: int, gpus_per_node: int, busy: float, seed: int
) -> Cluster:
    """``nodes`` hosts with ``busy`` of their GPUs held by running jobs drawn from the trace."""
    rng = random.Random(f"{seed}:running")
    packer = _Packer(nodes, gpus_per_node, random.Random(f"{seed}:placement"))
    weights = list(itertools.accumulate(job.duration_s for job in trace))
    total = nodes * gpus_per_node
    filled: list[tuple[TraceJob, list[tuple[int, tuple[int, ...]]]]] = []
    used = 0
    misses = 0
    # Fill the cluster (a draw that fits nowhere is a miss; many in a row: it is full) ...
    while used < total and misses < 200:
        job = trace[bisect.bisect_right(weights, rng.random() * weights[-1])]
        spots = packer.place(*split_gpus(job.gpus, gpus_per_node))
        if spots is None:
            misses += 1
            continue
        misses = 0
        filled.append((job, spots))
        used += job.gpus
    # ... then end jobs at random until ``busy`` of the GPUs are held.
    target = round(busy * total)
    ending = list(range(len(filled)))
    rng.shuffle(ending)
    ended: set[int] = set()
    for k in ending:
        if used <= target:
            break
        ended.add(k)
        used -= filled[k][0].gpus
        for node, ids in filled[k][1]:
            packer.give(node, ids)
    cpu_per_gpu, memory_per_gpu = CPU_MILLIS_PER_GPU, MEMORY_PER_GPU
    placed = tuple(
        PlacedJob(
            gpus=job.gpus,
            duration_s=job.duration_s,
            elapsed_s=rng.uniform(0, job.duration_s),
            replicas=tuple(
                RunningReplica(
                    node_name(node), ids, len(ids) * cpu_per_gpu, len(ids) * memory_per_gpu
                )
                for node, ids in spots
            ),
        )
        for k, (job, spots) in enumerate(filled)
        if k not in ended
    )
    views = []
    for i in range(nodes):
        taken = gpus_per_node - len(packer.free[i])
        path = topology_path(i)
        views.append(
            node_view(
                name=path[-1],
                gpus=gpus_per_node,
                cpu_millis=gpus_per_node * NODE_CPU_MILLIS_PER_GPU,
                memory=gpus_per_node * NODE_MEMORY_PER_GPU,
                used_gpu_ids=frozenset(range(gpus_per_node)) - set(packer.free[i]),
                used_cpu_millis=taken * cpu_per_gpu,
                used_memory=taken * memory_per_gpu,
                labels=dict(zip(TOPOLOGY_LEVELS, path, strict=True)),
                flavor=FLAVOR,
                topology=path,
            )
        )
    return Cluster(gpus_per_node, tuple(views), placed)


def draw_jobs(trace: Sequence[TraceJob], count: int, seed: int) -> list[TraceJob]:
    """``count`` waiting jobs drawn uniformly from the trace's rows (with replacement)."""
    rng = random.Random(f"{seed}:pending")
    return [rng.choice(trace) for _ in range(count)]


# -- queues, and the scenario one case runs ---------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    """What the first cycle of one case sees; the runner evolves it from there."""

    now: float
    gpus_per_node: int
    nodes: tuple[NodeView, ...]
    queues: tuple[QueueView, ...]
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...]
    standings: dict[str, float]
    flavors: tuple[FlavorView, ...] = (FlavorView(FLAVOR),)
    topology_levels: tuple[str, ...] = TOPOLOGY_LEVELS

    def snapshot(self) -> Snapshot:
        """Every waiting job in one snapshot (the runner takes a window of them instead)."""
        return Snapshot(
            now=self.now,
            nodes=self.nodes,
            queues=self.queues,
            pending=self.pending,
            running=self.running,
            flavors=self.flavors,
            standings=self.standings,
            topology_levels=self.topology_levels,
        )


def make_queues(
    count: int, cohorts: int, total_gpus: int, strategy: QueueStrategy = QUEUE_STRATEGY
) -> list[QueueView]:
    """``count`` queues in ``cohorts`` cohorts; nominal quotas add up to ``total_gpus``."""
    base, extra = divmod(total_gpus, count)
    queues = []
    for i in range(count):
        nominal = base + (1 if i < extra else 0)
        queues.append(
            QueueView(
                name=f"q-{i:04d}",
                tenant=f"team-{i:04d}",
                nominal={FLAVOR: nominal},
                strategy=strategy,
                cohort=f"cohort-{i % cohorts}",
                borrowing_limit={FLAVOR: BORROWING_RATIO * nominal},
            )
        )
    return queues


def build_scenario(
    cluster: Cluster,
    jobs: Sequence[TraceJob],
    *,
    queues: int,
    cohorts: int,
    seed: int,
    strategy: QueueStrategy = QUEUE_STRATEGY,
) -> Scenario:
    """Give the cluster's running jobs and the waiting ``jobs`` queues, tenants and ids."""
    rng = random.Random(f"{seed}:queues:{queues}")
    gpn = cluster.gpus_per_node
    now = START
    shells = make_queues(queues, cohorts, cluster.total_gpus, strategy)
    weights = [(q.nominal or {}).get(FLAVOR, 0) * rng.uniform(0.75, 1.25) for q in shells]
    owners = rng.choices(shells, weights=weights, k=len(cluster.placed))
    used: dict[str, int] = {}
    usage: dict[str, float] = {}
    running = []
    for k, (placed, queue) in enumerate(zip(cluster.placed, owners, strict=True)):
        started = now - placed.elapsed_s
        running.append(
            RunningJob(
                id=f"run-{k:06d}",
                queue=queue.name,
                tenant=queue.tenant,
                priority=priority_of(placed.gpus, gpn),
                submitted_at=started,
                started_at=started,
                replicas=placed.replicas,
                flavor_gpus={FLAVOR: placed.gpus},
                max_runtime=placed.duration_s,
            )
        )
        used[queue.name] = used.get(queue.name, 0) + placed.gpus
        usage[queue.tenant] = usage.get(queue.tenant, 0.0) + placed.gpus * placed.elapsed_s
    pending = []
    for i, job in enumerate(jobs):
        queue = shells[rng.randrange(queues)]
        replicas, per = split_gpus(job.gpus, gpn)
        pending.append(
            PendingJob(
                id=f"job-{i:05d}",
                queue=queue.name,
                priority=priority_of(job.gpus, gpn),
                submitted_at=now - (len(jobs) - i) * ARRIVAL_INTERVAL_S,
                tasks=(
                    TaskDemand(
                        "worker", replicas, per, per * CPU_MILLIS_PER_GPU, per * MEMORY_PER_GPU
                    ),
                ),
                gang_size=replicas,
                tenant=queue.tenant,
                sequence=i,
                max_runtime=job.duration_s,
                topology=topology_request(replicas),
                preempts=True,
            )
        )
    queue_views = tuple(
        QueueView(
            name=q.name,
            tenant=q.tenant,
            nominal=q.nominal,
            used={FLAVOR: used[q.name]} if q.name in used else {},
            strategy=q.strategy,
            cohort=q.cohort,
            borrowing_limit=q.borrowing_limit,
            lending_limit=q.lending_limit,
            weight=q.weight,
        )
        for q in shells
    )
    # Fair-share standing: GPU-hours the tenant's running jobs have used so far, per weight.
    standings = {q.tenant: usage.get(q.tenant, 0.0) / 3600 / q.weight for q in shells}
    return Scenario(
        now=now,
        gpus_per_node=gpn,
        nodes=cluster.nodes,
        queues=queue_views,
        pending=tuple(pending),
        running=tuple(running),
        standings=standings,
    )
