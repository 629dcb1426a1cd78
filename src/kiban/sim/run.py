"""``kiban sim`` without the terminal: read the inputs once, replay each policy, measure.

Fairness needs a second replay per tenant: rho compares a tenant's average JCT in the shared
cluster with its average JCT alone, under the same policy, on a synthetic cluster of its own
quota (its queue's nominal GPUs; an equal share of the cluster when it has no quota), rounded
up to whole nodes and to at least its largest job.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kiban.scheduler.snapshot import QueueView
from kiban.sim import cluster as clusters
from kiban.sim.cluster import SimCluster
from kiban.sim.engine import DEFAULT_CHECKPOINT_S, PreemptionLoop, SimOutcome, Simulator
from kiban.sim.metrics import Summary, failed_summary, mean_jct_by_tenant, rhos, summarize
from kiban.sim.policies import SimPolicy, policy_named
from kiban.sim.traces import TraceFormat, compress, cut_window, load_trace
from kiban.sim.workload import SimJob, make_jobs

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SimOptions:
    """Everything ``kiban sim`` is asked; validated when made."""

    trace: Path
    fmt: TraceFormat | None = None
    cluster_file: Path | None = None
    nodes: int | None = None
    gpus_per_node: int = 8
    quotas_from: Path | None = None
    borrowing: bool = True
    scale_quotas: bool = False
    policies: tuple[str, ...] = ("kiban",)
    load: float = 1.0
    window: tuple[float | None, float | None] = (None, None)
    seed: int = 0
    checkpoint_s: float = DEFAULT_CHECKPOINT_S
    rho: bool = True
    series: bool = False

    def __post_init__(self) -> None:
        if self.cluster_file is not None and self.nodes is not None:
            raise ValueError("give --cluster or --nodes, not both")
        if self.nodes is not None and self.nodes < 1:
            raise ValueError("--nodes must be at least 1")
        if self.gpus_per_node < 1:
            raise ValueError("--gpus-per-node must be at least 1")
        if self.cluster_file is None and self.nodes is None and self.quotas_from is None:
            raise ValueError(
                "say which cluster: --nodes N (--gpus-per-node G), --cluster FILE "
                "or --quotas-from FILE"
            )
        if self.scale_quotas and self.quotas_from is None:
            raise ValueError("--scale-quotas needs --quotas-from (the team node counts to scale)")
        if self.scale_quotas and self.cluster_file is None and self.nodes is None:
            raise ValueError(
                "--scale-quotas needs the cluster to scale to: --nodes N or --cluster FILE "
                "(without them the cluster is the quota file's own nodes)"
            )
        if not self.borrowing and self.quotas_from is None:
            raise ValueError("--no-borrowing needs --quotas-from (it applies to the team quotas)")
        if not self.load > 0 or not math.isfinite(self.load):
            raise ValueError("--load must be a positive number")
        if self.checkpoint_s < 0:
            raise ValueError("--checkpoint-interval must not be negative (0: never)")
        if not self.policies:
            raise ValueError("name at least one policy")
        for name in self.policies:
            policy_named(name)


@dataclass(frozen=True)
class Prepared:
    """The inputs every policy replays: cluster, queues, jobs, and what to tell the reader."""

    cluster: SimCluster
    queues: tuple[QueueView, ...]
    jobs: tuple[SimJob, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class PolicyResult:
    """One policy's replay and its figures."""

    policy: SimPolicy
    outcome: SimOutcome | None  # None: the replay failed (``error`` says why)
    summary: Summary
    error: str | None = None


@dataclass(frozen=True)
class SimReport:
    """All policies side by side, and the inputs they shared."""

    prepared: Prepared
    results: tuple[PolicyResult, ...]
    settings: dict[str, object] = field(default_factory=dict)


def prepare(options: SimOptions) -> Prepared:
    """Read the trace and the cluster; cut, compress and shape the jobs."""
    records = load_trace(options.trace, options.fmt)
    records = cut_window(records, *options.window)
    if not records:
        raise ValueError(f"{options.trace}: no job is submitted inside --window")
    records = compress(records, options.load)
    quotas = clusters.read_quotas(options.quotas_from) if options.quotas_from else None
    if options.cluster_file is not None:
        cluster = clusters.load_cluster_file(options.cluster_file)
    else:
        nodes = options.nodes if options.nodes is not None else sum((quotas or {}).values())
        cluster = clusters.synthetic(nodes, options.gpus_per_node)
    if quotas is not None:
        cluster = clusters.with_quotas(
            cluster,
            quotas,
            options.gpus_per_node,
            borrowing=options.borrowing,
            scale=options.scale_quotas,
        )
    queues, queue_of = cluster.layout(r.tenant for r in records)
    jobs = make_jobs(records, cluster, queue_of, options.seed, source=str(options.trace))
    notes = []
    limited = sum(j.time_limit_s is not None for j in jobs)
    if limited < len(jobs):
        notes.append(
            f"{len(jobs) - limited:,} of {len(jobs):,} jobs have no time limit: backfill and the "
            "order know their durations only under oracle policies (sjf), recommended plans on "
            "run times it estimates as it goes; the others see no end"
        )
    unknown = sorted({j.tenant for j in jobs if j.queue == clusters.SHARED_QUEUE})
    if quotas is not None and unknown:
        notes.append(
            f"teams without a quota, in queue {clusters.SHARED_QUEUE}: {', '.join(unknown)}"
        )
    return Prepared(cluster, tuple(queues), tuple(jobs), tuple(notes))


def replay(
    prepared: Prepared, policy: SimPolicy, options: SimOptions, say: Progress | None = None
) -> PolicyResult:
    """One policy on the prepared inputs, and (if asked) the alone replays for rho."""
    progress: Progress = say or (lambda _: None)
    simulator = Simulator(
        prepared.jobs,
        prepared.cluster,
        prepared.queues,
        policy,
        checkpoint_s=options.checkpoint_s,
        series=options.series,
    )
    try:
        outcome = simulator.run()
    except PreemptionLoop as exc:
        progress(f"{policy.name}: stopped: {exc}")
        return PolicyResult(policy, None, failed_summary(str(exc)), error=str(exc))
    progress(
        f"{policy.name}: {len(prepared.jobs):,} jobs replayed in {outcome.wall_s:.1f} s "
        f"({outcome.cycles:,} cycles, {outcome.core_s:.1f} s in the core)"
    )
    rho_by_tenant = None
    if options.rho:
        started = time.perf_counter()
        try:
            alone = alone_jcts(prepared, policy, options)
        except PreemptionLoop as exc:  # the shared replay stands; only rho is lost
            progress(f"{policy.name}: no rho: a tenant's replay alone stopped: {exc}")
        else:
            rho_by_tenant = rhos(mean_jct_by_tenant(outcome.runs), alone)
            progress(
                f"{policy.name}: each tenant alone, for rho, in "
                f"{time.perf_counter() - started:.1f} s"
            )
    return PolicyResult(policy, outcome, summarize(outcome, rho_by_tenant))


def alone_jcts(prepared: Prepared, policy: SimPolicy, options: SimOptions) -> dict[str, float]:
    """Each tenant's average JCT replayed alone on a cluster of its own quota."""
    cluster = prepared.cluster
    per_node = max(cluster.gpus_per_node, 1)
    queue_by_name = {q.name: q for q in prepared.queues}
    by_tenant: dict[str, list[SimJob]] = {}
    for job in prepared.jobs:
        by_tenant.setdefault(job.tenant, []).append(job)
    result: dict[str, float] = {}
    for tenant, jobs in sorted(by_tenant.items()):
        queue = queue_by_name[jobs[0].queue]
        if queue.tenant != tenant and (queue.nominal is None or sum(queue.nominal.values()) == 0):
            queue = QueueView(name=tenant, tenant=tenant)  # a shared queue: no quota of its own
        gpus = clusters.alone_gpus(cluster, queue, len(by_tenant))
        gpus = max(gpus, max(j.gpus for j in jobs))
        alone = clusters.synthetic(math.ceil(gpus / per_node), per_node)
        own = [replace(j, queue=tenant) for j in jobs]
        queues, _ = alone.layout([tenant])
        outcome = Simulator(own, alone, queues, policy, checkpoint_s=options.checkpoint_s).run()
        result.update(mean_jct_by_tenant(outcome.runs))
    return result


def run_sim(options: SimOptions, say: Progress | None = None) -> SimReport:
    """Prepare once, replay every policy asked for, in order."""
    prepared = prepare(options)
    results = tuple(replay(prepared, policy_named(name), options, say) for name in options.policies)
    settings: dict[str, object] = {
        "trace": str(options.trace),
        "cluster": prepared.cluster.description,
        "gpus": prepared.cluster.total_gpus,
        "queues": len(prepared.queues),
        "jobs": len(prepared.jobs),
        "borrowing": options.borrowing,
        "scale_quotas": options.scale_quotas,
        "load": options.load,
        "window": options.window,
        "seed": options.seed,
        "checkpoint_s": options.checkpoint_s,
    }
    return SimReport(prepared, results, settings)


def policies_from(compare: str | None, policy: str) -> tuple[str, ...]:
    """``--compare a,b,c`` (in that order, each once) or the one ``--policy``."""
    if compare is None:
        return (policy,)
    names = tuple(dict.fromkeys(n.strip() for n in compare.split(",") if n.strip()))
    if not names:
        raise ValueError("--compare needs policy names, e.g. fifo,sjf,kiban")
    return names


__all__ = [
    "PolicyResult",
    "Prepared",
    "SimOptions",
    "SimReport",
    "policies_from",
    "prepare",
    "replay",
    "run_sim",
]
