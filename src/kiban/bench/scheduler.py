"""``kiban bench scheduler``: the pure scheduler core, cycle after cycle, on a synthetic cluster.

The cluster, its running work, the queues and the waiting jobs are those of
:mod:`kiban.bench.synthetic`. Each case runs cycles as the control loop does:

1. Take a snapshot: every node with what is free on it, the queues with the GPUs their jobs
   use, the running jobs, and the first ``SCHEDULING_WINDOW`` waiting jobs of each queue in the
   core's order (as ``build_snapshot`` does).
2. Call ``schedule(snapshot)``; only this call is timed as the core's cycle time.
3. Apply its admissions: each admitted job leaves the waiting jobs and runs with its replicas'
   GPUs taken from their nodes and its GPUs counted in its queue's use. A placement on GPUs that
   are not free, on a node that is not schedulable, or that breaks a gang is an error, not a
   number.
4. When a cycle admits nothing, the simulated clock moves a tick past the next expected end
   (``started_at + max_runtime``) of a running job, and every job that has ended by then
   finishes, giving its GPUs back (the events a real loop would coalesce into one pass).
   The tick is ``FINISH_TICK_S`` and doubles with each cycle in a row that admits nothing, so
   that a job waiting for a weeks-long job to end costs tens of cycles, not thousands: the
   benchmark measures the core, not the trace's longest runs. With nothing running, no more
   can start: the case is stuck.

A case ends when every job is admitted, is stuck, or reaches ``max_cycles`` or
``time_limit_s`` (wall clock), and says which. ``placements_per_s`` is replicas placed / the
sum of the core's cycle times; the time spent building snapshots and applying decisions (the
benchmark's, not the core's) is reported beside it. The garbage collector is set as ``kiban
up`` sets it (objects made at start-up frozen, generation 0 threshold 50,000).
"""

from __future__ import annotations

import contextlib
import cProfile
import gc
import heapq
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from kiban.bench.loadgen import BenchError, as_ms
from kiban.bench.machine import describe_machine
from kiban.bench.synthetic import (
    Scenario,
    TraceJob,
    build_cluster,
    build_scenario,
    draw_jobs,
    find_trace,
    load_philly,
)
from kiban.scheduler import Decisions, schedule
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.policy import DEFAULT_POLICY, Policy
from kiban.scheduler.reasons import SCHEDULING_WINDOW
from kiban.scheduler.snapshot import QueueStrategy, RunningJob, Snapshot
from kiban.sim.state import ClusterState, InvalidDecision
from kiban.stats import percentile

GOAL_PLACEMENTS_PER_S = 10_000.0
GOAL_P99_CYCLE_MS = 100.0
CITED: dict[str, dict[str, Any]] = {
    "kube_scheduler_pods_per_s": {
        "name": "kube-scheduler",
        "value": 100.0,
        "what": "kube-scheduler's published scheduling throughput threshold, pods/s",
    },
    "yunikorn_pods_per_s": {
        "name": "YuniKorn",
        "value": 833.0,
        "what": "YuniKorn's reported throughput on 5,000 simulated nodes, pods/s",
    },
    "slurm_jobs_per_s": {
        "name": "Slurm",
        "value": 500.0,
        "what": "Slurm's documented sustained job rate, jobs/s",
    },
}
"""Other schedulers' published figures: cited, not measured here."""

FINISH_TICK_S = 60.0
CONTENDED_NODES = 512
"""Nodes of the contended case: 4,096 GPUs, 90 % busy, so the 10,000 waiting jobs (about
35,000 GPUs) stay a backlog for the whole case."""
CONTENDED_CYCLES = 400
Progress = Callable[[str], None]


@dataclass(frozen=True)
class SchedulerBenchOptions:
    """The cluster, the workload, and the bounds of each case."""

    nodes: int = 16_384
    gpus_per_node: int = 8
    jobs: int = 10_000
    queues: int = 30
    cohorts: int = 5
    big_queues: int = 1_000
    seed: int = 0
    busy: float = 0.9
    max_cycles: int = 5_000
    time_limit_s: float = 300.0
    traces: Path | None = None
    profile_dir: Path | None = None
    contended_nodes: int = CONTENDED_NODES
    contended_cycles: int = CONTENDED_CYCLES

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "jobs", "queues", "cohorts", "max_cycles"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.cohorts > self.queues:
            raise ValueError("--cohorts must not be more than --queues")
        if self.big_queues != 0 and self.big_queues < self.cohorts:
            raise ValueError("--big-queues must be 0 (no second case) or at least --cohorts")
        if not 0 <= self.busy < 1:
            raise ValueError("--busy must be at least 0 and less than 1")
        if self.time_limit_s <= 0:
            raise ValueError("--time-limit must be positive")
        if self.contended_nodes < 0:
            raise ValueError("--contended-nodes must be 0 (no contended case) or more")
        if self.contended_cycles < 1:
            raise ValueError("--contended-cycles must be at least 1")


BENCH_POLICY = DEFAULT_POLICY
"""The default policy, preemption included: the Philly-sized jobs' priority classes (Kueue's
baseline) may preempt lower ones, and queues below nominal reclaim what their cohort lent."""


class CycleRunner:
    """The evolving state of one case at simulated ``now``, with the benchmark's counters.

    The cluster itself (snapshots, applying decisions, checks) is the simulator's
    :class:`~kiban.sim.state.ClusterState`; this adds the finish ticks and the usage in GPU-hours.
    """

    def __init__(self, scenario: Scenario, policy: Policy = BENCH_POLICY) -> None:
        self.cluster = ClusterState(
            nodes=scenario.nodes,
            queues=scenario.queues,
            order_key=policy.order_key,
            flavors=scenario.flavors,
            topology_levels=scenario.topology_levels,
        )
        self.scenario = scenario
        self.policy = policy
        self.now = scenario.now
        for job in scenario.running:
            self.cluster.add_running(job, take=False)  # the scenario's nodes already count them
        self.ends: list[tuple[float, str]] = [
            (job.expected_end, job.id) for job in scenario.running if job.expected_end is not None
        ]
        heapq.heapify(self.ends)
        for waiting in sorted(scenario.pending, key=policy.order_key):
            self.cluster.add_waiting(waiting)
        self.usage = dict(scenario.standings)  # GPU-hours per tenant (weights are all 1)
        self.tenant_gpus: dict[str, int] = {}
        for running in scenario.running:
            self.tenant_gpus[running.tenant] = (
                self.tenant_gpus.get(running.tenant, 0) + running.gpus
            )
        self.admitted = 0  # starts, a preempted job's restart included
        self.waited = {job.id for job in scenario.pending}
        self.started_once: set[str] = set()  # of the jobs waiting at the start
        self.replicas_placed = 0
        self.gpus_placed = 0
        self.finished = 0
        self.quiet = 0  # cycles in a row that admitted nothing
        self.preempted = 0
        self.cache = CapacityCache()  # the core's capacity index, kept as the control loop does

    @property
    def pending(self) -> int:
        return self.cluster.pending

    @property
    def running(self) -> dict[str, RunningJob]:
        return self.cluster.running

    def snapshot(self) -> Snapshot:
        """The cycle's snapshot at the runner's clock, standings from its usage."""
        # GPU-hours to GPU-seconds, the unit of the core's in-cycle admission charge.
        standings = {tenant: hours * 3600 for tenant, hours in self.usage.items()}
        return self.cluster.snapshot(self.now, standings)

    def apply(self, decisions: Decisions) -> int:
        """Stop preempted jobs, start the admitted ones where the core placed them; return how
        many replicas were placed."""
        try:
            applied = self.cluster.apply(decisions, self.now)
        except InvalidDecision as exc:
            raise BenchError(str(exc)) from None
        for stopped, _preempt in applied.stopped:
            self.tenant_gpus[stopped.tenant] -= stopped.gpus
            self.preempted += 1
        placed = 0
        for running in applied.started:
            if running.expected_end is not None:
                heapq.heappush(self.ends, (running.expected_end, running.id))
            self.tenant_gpus[running.tenant] = (
                self.tenant_gpus.get(running.tenant, 0) + running.gpus
            )
            self.admitted += 1
            if running.id in self.waited:
                self.started_once.add(running.id)
            self.gpus_placed += running.gpus
            placed += len(running.replicas)
        self.replicas_placed += placed
        if placed:
            self.quiet = 0
        return placed

    def finish_next(self) -> int:
        """Move the clock a tick past the next expected end; finish the jobs ended by then.

        The tick doubles with each call since the last admission (up to 2**16 ticks).
        """
        if not self.ends:
            return 0
        until = max(self.now, self.ends[0][0] + FINISH_TICK_S * 2 ** min(self.quiet, 16))
        self.quiet += 1
        # Usage (GPU-hours) accrues to the end of the tick, as if the jobs ending in it ran on.
        for tenant, gpus in self.tenant_gpus.items():
            self.usage[tenant] = self.usage.get(tenant, 0.0) + gpus * (until - self.now) / 3600
        self.now = until
        done = 0
        while self.ends and self.ends[0][0] <= until:
            _, job_id = heapq.heappop(self.ends)
            job = self.running.get(job_id)
            if job is None or job.expected_end is None or job.expected_end > until:
                continue  # preempted (and perhaps started again later)
            self.cluster.finish(job_id)
            self.tenant_gpus[job.tenant] -= job.gpus
            done += 1
        self.finished += done
        return done

    def check(self) -> None:
        """Every GPU is either free or held by exactly one running replica; queue use adds up."""
        try:
            self.cluster.check()
        except InvalidDecision as exc:
            raise BenchError(str(exc)) from None


def run_case(
    scenario: Scenario,
    *,
    max_cycles: int,
    time_limit_s: float,
    profiler: cProfile.Profile | None = None,
    say: Progress | None = None,
    policy: Policy = BENCH_POLICY,
) -> dict[str, Any]:
    """Run cycles until every job is admitted, it is stuck, or a bound; return the figures.

    Each cycle's waits are read after the cycle (every ``Wait``, numbered, as the control loop
    records them), timed apart: ``schedule()`` makes them only when read, and the simulator
    reads few of them."""
    progress: Progress = say or (lambda _: None)
    runner = CycleRunner(scenario, policy)
    rss_at_start = psutil.Process().memory_info().rss
    cycle_s: list[float] = []
    cycle_cpu_s: list[float] = []  # the same cycles in this process's CPU time (load aside)
    with_waits_s: list[float] = []  # the cycle and reading every wait it gives
    admitting_s: list[float] = []
    rebuild_s = apply_s = 0.0
    window_max = 0
    waits_read = 0
    first: tuple[float, int, int] | None = None
    stopped = "every job admitted"
    t_index = time.perf_counter()
    runner.cache.indexes(runner.cluster.views)  # built once at start-up, then kept up to date
    index_build_s = time.perf_counter() - t_index
    started = time.perf_counter()
    next_note = started + 10
    while runner.pending:
        if len(cycle_s) >= max_cycles:
            stopped = f"max cycles ({max_cycles})"
            break
        if time.perf_counter() - started > time_limit_s:
            stopped = f"time limit ({time_limit_s:g} s)"
            break
        t0 = time.perf_counter()
        snapshot = runner.snapshot()
        t1 = time.perf_counter()
        c1 = time.process_time()
        if profiler is not None:
            profiler.enable()
        decisions = schedule(snapshot, runner.policy, runner.cache)
        if profiler is not None:
            profiler.disable()
        t2 = time.perf_counter()
        cycle_cpu_s.append(time.process_time() - c1)
        waited = len(decisions.waiting)
        t_read = time.perf_counter()
        placed = runner.apply(decisions)
        t3 = time.perf_counter()
        rebuild_s += t1 - t0
        apply_s += t3 - t_read
        cycle_s.append(t2 - t1)
        with_waits_s.append(t_read - t1)
        waits_read += waited
        window_max = max(window_max, len(snapshot.pending))
        if first is None:
            first = (t2 - t1, len(decisions.admitted), placed)
        if decisions.admitted:
            admitting_s.append(t2 - t1)
        elif decisions.preempted:
            pass  # the victims stopped at once; the preemptors start in the next cycle
        elif runner.ends:
            runner.finish_next()
        else:
            stopped = "stuck: nothing admitted, and no running job will end"
            break
        del snapshot, decisions
        if t3 > next_note:
            next_note = t3 + 10
            progress(
                f"  {len(cycle_s):,} cycles, {runner.admitted:,} jobs admitted, "
                f"{runner.pending:,} waiting, last cycle {as_ms(t2 - t1):g} ms, placed {placed}"
            )
    wall_s = time.perf_counter() - started
    runner.check()
    core_s = sum(cycle_s)
    rate = runner.replicas_placed / core_s if core_s > 0 else 0.0
    p99 = as_ms(percentile(cycle_s, 99))
    return {
        "placements_per_s": round(rate, 1),
        "p50_cycle_ms": as_ms(percentile(cycle_s, 50)),
        "p99_cycle_ms": p99,
        # CPU time, which a busy machine inflates far less than the wall clock above
        "p99_cycle_cpu_ms": as_ms(percentile(cycle_cpu_s, 99)),
        "core_cpu_s": round(sum(cycle_cpu_s), 3),
        "peak_rss_mb": peak_rss_mb(),
        "p99_admitting_cycle_ms": as_ms(percentile(admitting_s, 99)),
        "p99_cycle_reading_waits_ms": as_ms(percentile(with_waits_s, 99)),
        "waits_per_cycle": round(waits_read / len(cycle_s), 1) if cycle_s else 0.0,
        "max_cycle_ms": as_ms(max(cycle_s, default=float("nan"))),
        "first_cycle_ms": as_ms(first[0]) if first else None,
        "first_cycle_jobs_admitted": first[1] if first else 0,
        "first_cycle_placements_per_s": round(first[2] / first[0], 1) if first else None,
        "rss_at_start_mb": round(rss_at_start / 2**20, 1),
        "cycles": len(cycle_s),
        "admitting_cycles": len(admitting_s),
        "jobs": len(scenario.pending),
        "jobs_admitted": len(runner.started_once),
        "starts": runner.admitted,
        "jobs_preempted": runner.preempted,
        "jobs_left_waiting": len(runner.waited - runner.started_once),
        "waiting_at_end": runner.pending,
        "replicas_placed": runner.replicas_placed,
        "gpus_placed": runner.gpus_placed,
        "running_jobs_at_start": len(scenario.running),
        "running_jobs_finished": runner.finished,
        "max_jobs_in_snapshot": window_max,
        "core_s": round(core_s, 3),
        "snapshot_build_s": round(rebuild_s, 3),
        "index_build_s": round(index_build_s, 3),
        "apply_s": round(apply_s, 3),
        "wall_s": round(wall_s, 3),
        "simulated_s": round(runner.now - scenario.now, 1),
        "stopped": stopped,
        "vs_goal": round(rate / GOAL_PLACEMENTS_PER_S, 3),
        "vs_kube_scheduler_threshold": round(
            rate / float(CITED["kube_scheduler_pods_per_s"]["value"]), 1
        ),
        "goals_met": {
            "placements_per_s": rate >= GOAL_PLACEMENTS_PER_S,
            "p99_cycle_ms": p99 <= GOAL_P99_CYCLE_MS,
        },
    }


def peak_rss_mb() -> float:
    """The process's peak resident memory so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def run_scheduler_bench(
    options: SchedulerBenchOptions, say: Progress | None = None
) -> dict[str, Any]:
    """Build the cluster once, run the main case and the many-queue case on it, report both."""
    progress: Progress = say or (lambda _: None)
    machine = describe_machine()
    trace_path = find_trace(options.traces)
    started = time.perf_counter()
    trace = load_philly(trace_path)
    cluster = build_cluster(
        trace,
        nodes=options.nodes,
        gpus_per_node=options.gpus_per_node,
        busy=options.busy,
        seed=options.seed,
    )
    jobs = draw_jobs(trace, options.jobs, options.seed)
    progress(
        f"cluster: {options.nodes:,} nodes x {options.gpus_per_node} GPUs, "
        f"{cluster.busy_gpus:,} GPUs held by {len(cluster.placed):,} running jobs; "
        f"{len(jobs):,} jobs waiting for {sum(j.gpus for j in jobs):,} GPUs "
        f"(built in {time.perf_counter() - started:.1f} s)"
    )
    cases = [("main", options.queues)]
    if options.big_queues:
        cases.append((f"queues_{options.big_queues}", options.big_queues))
    report: dict[str, Any] = {}
    profiles: dict[str, str] = {}
    for key, queues in cases:
        scenario = build_scenario(
            cluster, jobs, queues=queues, cohorts=options.cohorts, seed=options.seed
        )
        progress(f"{queues:,} queues in {options.cohorts} cohorts: running cycles")
        profiler = cProfile.Profile() if options.profile_dir else None
        with server_gc():
            entry = run_case(
                scenario,
                max_cycles=options.max_cycles,
                time_limit_s=options.time_limit_s,
                profiler=profiler,
                say=progress,
            )
        entry["queues"] = queues
        del scenario
        progress(
            f"{queues:,} queues: {entry['placements_per_s']:,.0f} placements/s, p99 cycle "
            f"{entry['p99_cycle_ms']:g} ms over {entry['cycles']:,} cycles ({entry['stopped']})"
        )
        if profiler is not None and options.profile_dir is not None:
            options.profile_dir.mkdir(parents=True, exist_ok=True)
            path = options.profile_dir / f"scheduler-{queues}q.pstats"
            profiler.dump_stats(path)
            profiles[key] = str(path)
        if key == "main":
            report.update(entry)
        else:
            report[key] = entry
    if options.contended_nodes:
        report["contended"] = _contended_case(options, trace, jobs, progress)
    if options.big_queues:
        big = report[f"queues_{options.big_queues}"]
        report["side_by_side"] = {
            "what": f"{options.big_queues} queues against {options.queues}, same cluster and jobs",
            "placements_per_s_ratio": _ratio(big["placements_per_s"], report["placements_per_s"]),
            "p99_cycle_ms_ratio": _ratio(big["p99_cycle_ms"], report["p99_cycle_ms"]),
        }
    report["goals"] = {
        "placements_per_s": GOAL_PLACEMENTS_PER_S,
        "p99_cycle_ms": GOAL_P99_CYCLE_MS,
    }
    report["cited"] = CITED
    report["settings"] = {
        "nodes": options.nodes,
        "gpus_per_node": options.gpus_per_node,
        "gpus": cluster.total_gpus,
        "jobs": options.jobs,
        "jobs_gpus": sum(j.gpus for j in jobs),
        "queues": options.queues,
        "cohorts": options.cohorts,
        "big_queues": options.big_queues,
        "seed": options.seed,
        "busy": options.busy,
        "busy_gpus": cluster.busy_gpus,
        "running_jobs": len(cluster.placed),
        "window_per_queue": SCHEDULING_WINDOW,
        "finish_tick_s": FINISH_TICK_S,
        "max_cycles": options.max_cycles,
        "contended_nodes": options.contended_nodes,
        "contended_cycles": options.contended_cycles,
        "time_limit_s": options.time_limit_s,
        "trace": str(trace_path),
        "profiled": bool(options.profile_dir),
        "profiles": profiles,
    }
    if hasattr(os, "getloadavg"):
        machine["load_average_after"] = round(os.getloadavg()[0], 2)
    report["machine"] = machine
    return report


def _contended_case(
    options: SchedulerBenchOptions,
    trace: list[TraceJob],
    jobs: list[TraceJob],
    progress: Progress,
) -> dict[str, Any]:
    """The same waiting jobs on a cluster far too small for them (``contended_nodes``, 90 %
    busy), preemption on, for ``contended_cycles`` cycles: the backlog stays, as in a contended
    replay. Run twice on the same cluster and jobs: StrictFIFO queues (the jobs behind a queue's
    blocked head are not visited one by one) and BestEffortFIFO queues (every job of the window
    is tried in every cycle), side by side."""
    cluster = build_cluster(
        trace,
        nodes=options.contended_nodes,
        gpus_per_node=options.gpus_per_node,
        busy=options.busy,
        seed=options.seed,
    )
    entries: dict[str, dict[str, Any]] = {}
    for name, strategy in (
        ("strict_fifo", QueueStrategy.STRICT_FIFO),
        ("best_effort_fifo", QueueStrategy.BEST_EFFORT_FIFO),
    ):
        scenario = build_scenario(
            cluster,
            jobs,
            queues=options.queues,
            cohorts=options.cohorts,
            seed=options.seed,
            strategy=strategy,
        )
        progress(
            f"contended, {name}: {options.contended_nodes:,} nodes, {cluster.busy_gpus:,} of "
            f"{cluster.total_gpus:,} GPUs busy, {len(jobs):,} jobs waiting"
        )
        with server_gc():
            entry = run_case(
                scenario,
                max_cycles=options.contended_cycles,
                time_limit_s=options.time_limit_s,
                say=progress,
            )
        entry["strategy"] = strategy.value
        entries[name] = entry
        progress(
            f"contended, {name}: {entry['placements_per_s']:,.0f} placements/s, p99 cycle "
            f"{entry['p99_cycle_ms']:g} ms ({entry['p99_cycle_reading_waits_ms']:g} ms reading "
            f"every wait; {entry['p99_cycle_cpu_ms']:g} ms of CPU) over {entry['cycles']:,} cycles"
        )
    strict, best = entries["strict_fifo"], entries["best_effort_fifo"]
    return {
        **strict,
        "best_effort_fifo": best,
        "nodes": options.contended_nodes,
        "gpus": cluster.total_gpus,
        "busy_gpus": cluster.busy_gpus,
        "side_by_side": {
            "what": "StrictFIFO queues against BestEffortFIFO, same cluster, jobs and cycles; "
            "and each cycle alone against the cycle plus reading every wait",
            "p99_cycle_ms_best_effort_over_strict": _ratio(
                best["p99_cycle_ms"], strict["p99_cycle_ms"]
            ),
            "p99_cycle_ms_reading_waits_over_not": _ratio(
                strict["p99_cycle_reading_waits_ms"], strict["p99_cycle_ms"]
            ),
        },
        "goals_met": {"p99_cycle_ms": strict["p99_cycle_ms"] <= GOAL_P99_CYCLE_MS},
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


@contextlib.contextmanager
def server_gc() -> Iterator[None]:
    """The collector set as ``kiban up`` sets it (see ``kiban.server``), then put back."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        gc.collect()


__all__ = [
    "CITED",
    "GOAL_P99_CYCLE_MS",
    "GOAL_PLACEMENTS_PER_S",
    "CycleRunner",
    "SchedulerBenchOptions",
    "run_case",
    "run_scheduler_bench",
]
