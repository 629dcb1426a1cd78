"""The benchmarks of kiban's parts, each alone: the scheduler core (``bench scheduler``), the
control loop (``control``), health remediation (``health``), Kubernetes binding (``kube``) and
the serving router (``router``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kiban.cli import render
from kiban.cli.bench_report import JsonOpt, checked, report

component_benches = typer.Typer()
"""Mounted in ``kiban bench`` (``kiban.cli.bench``)."""


@component_benches.command("scheduler")
def scheduler(
    nodes: Annotated[int, typer.Option(help="nodes of the synthetic cluster")] = 16_384,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs of each node")] = 8,
    jobs: Annotated[int, typer.Option(help="waiting jobs, sized from the Philly trace")] = 10_000,
    queues: Annotated[int, typer.Option(help="queues of the main case")] = 30,
    cohorts: Annotated[int, typer.Option(help="cohorts the queues are spread over")] = 5,
    big_queues: Annotated[
        int, typer.Option(help="queues of the second case, same cluster and jobs (0: none)")
    ] = 1_000,
    seed: Annotated[int, typer.Option(help="seed of every random draw")] = 0,
    busy: Annotated[
        float, typer.Option(help="share of the GPUs held by running jobs at the start")
    ] = 0.9,
    max_cycles: Annotated[int, typer.Option(help="at most this many cycles per case")] = 5_000,
    time_limit: Annotated[
        float, typer.Option(help="at most this many seconds (wall clock) per case")
    ] = 300.0,
    traces: Annotated[
        Path | None,
        typer.Option(
            help="folder of philly_jobs_sia.csv (default $KIBAN_TRACES, ../shared/traces)"
        ),
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(help="folder for a cProfile of the core's calls per case (slows them)"),
    ] = None,
    contended_nodes: Annotated[
        int,
        typer.Option(help="nodes of the contended case, the same jobs far too many (0: none)"),
    ] = 512,
    contended_cycles: Annotated[
        int, typer.Option(help="cycles of each contended case at most")
    ] = 400,
    as_json: JsonOpt = False,
) -> None:
    """Placements/s, cycle time and memory of the pure scheduler core on a synthetic cluster.

    Nodes carry the four OCI RDMA topology levels; queues and cohorts are shaped like Kueue's
    scheduler baseline; waiting jobs are drawn from the Philly trace (1 to 128 GPUs); --busy of
    the cluster runs jobs. Cycles run until every job is admitted (when one admits nothing,
    running jobs finish in order of expected end). The same cluster is run with --queues and
    with --big-queues, side by side, and the contended case: the same jobs on --contended-nodes
    (90 % busy), with StrictFIFO and with BestEffortFIFO queues.
    """
    from kiban.bench.loadgen import BenchError
    from kiban.bench.report import scheduler_table
    from kiban.bench.scheduler import SchedulerBenchOptions, run_scheduler_bench

    options = checked(
        SchedulerBenchOptions,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        jobs=jobs,
        queues=queues,
        cohorts=cohorts,
        big_queues=big_queues,
        seed=seed,
        busy=busy,
        max_cycles=max_cycles,
        time_limit_s=time_limit,
        traces=traces,
        profile_dir=profile,
        contended_nodes=contended_nodes,
        contended_cycles=contended_cycles,
    )
    report(
        lambda: run_scheduler_bench(options, say=render.say),
        (BenchError,),
        scheduler_table,
        as_json,
    )


@component_benches.command("control")
def control(
    running: Annotated[int, typer.Option(help="training jobs running")] = 1_000,
    services: Annotated[int, typer.Option(help="inference services, one replica each")] = 100,
    passes: Annotated[int, typer.Option(help="passes timed of each kind")] = 10,
    hang: Annotated[float, typer.Option(help="seconds one service's readiness probe hangs")] = 2.0,
    against: Annotated[
        Path | None,
        typer.Option(help="another kiban checkout to measure the same way, side by side"),
    ] = None,
    rounds: Annotated[
        int, typer.Option(help="with --against: runs of each, alternating (medians shown)")
    ] = 1,
    as_json: JsonOpt = False,
) -> None:
    """The service controller's and the control loop's pass times with many running jobs and
    services, and how long a cancel or settling transaction waits while a probe hangs.

    With --against, the same run on another checkout (e.g. before a change), with ratios.
    """
    from kiban.bench.control import ControlBenchOptions, control_table, run_control_bench

    options = checked(
        ControlBenchOptions,
        running=running,
        services=services,
        passes=passes,
        hang_s=hang,
        against=against,
        rounds=rounds,
    )
    report(
        lambda: run_control_bench(options, say=render.say),
        (RuntimeError,),
        control_table,
        as_json,
    )


@component_benches.command("health")
def health(
    nodes: Annotated[int, typer.Option(help="virtual nodes, each with an agent reporting")] = 1024,
    interval: Annotated[float, typer.Option(help="seconds between a node's checks")] = 5.0,
    faults: Annotated[int, typer.Option(help="nodes that get a GPU fault")] = 32,
    intervals: Annotated[int, typer.Option(help="check intervals simulated")] = 4,
    seed: Annotated[int, typer.Option(help="seed of the faults' nodes and times")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """From a GPU fault in a reading to its node cordoned and its jobs requeued (p50/p99), on
    many virtual nodes; the /metrics render and the agent's CPU per check where measured."""
    from kiban.bench.health import HealthBenchOptions, health_table, run_health_bench

    options = checked(
        HealthBenchOptions,
        nodes=nodes,
        interval_s=interval,
        faults=faults,
        intervals=intervals,
        seed=seed,
    )
    report(lambda: run_health_bench(options), (RuntimeError,), health_table, as_json)


@component_benches.command("kube")
def kube(
    nodes: Annotated[int, typer.Option(help="fake 8-GPU nodes of the local control plane")] = 1_000,
    pods: Annotated[int, typer.Option(help="pods of each phase")] = 1_000,
    gpus_per_pod: Annotated[int, typer.Option(help="GPUs of each pod (1 to 8, or 0)")] = 8,
    workers: Annotated[
        int, typer.Option(help="requests in flight when the bench itself creates pods")
    ] = 8,
    timeout: Annotated[float, typer.Option(help="at most this many seconds per phase")] = 600.0,
    as_json: JsonOpt = False,
) -> None:
    """Pods bound and Running per second through kiban on a real API server, side by side.

    Starts the local control plane (etcd, kube-apiserver, KWOK; scripts/ensure-kube.sh builds
    them) with --nodes fake nodes and times, each on an emptied cluster, until every one of
    --pods pods is Running:

    1. raw: the same client creating bound pods (nodeName), the machine's limit;

    2. kube-scheduler of the same release binding the same pods;

    3. kube-scheduler on a backlog of the same pods, all created before it starts;

    4. kiban: one gang of --pods replicas, submitted as the API submits;

    5. kiban: --pods one-replica jobs.
    """
    from kiban.bench.kube import KubeBenchOptions, run_kube_bench
    from kiban.bench.loadgen import BenchError
    from kiban.bench.report import kube_table
    from kiban.devtools.kube import KubeBinariesMissing

    options = checked(
        KubeBenchOptions,
        nodes=nodes,
        pods=pods,
        gpus_per_pod=gpus_per_pod,
        workers=workers,
        phase_timeout_s=timeout,
    )
    report(
        lambda: run_kube_bench(options, say=render.say),
        (BenchError, KubeBinariesMissing),
        kube_table,
        as_json,
        "interrupted; the control plane is stopped",
    )


@component_benches.command("router")
def router(
    clients: Annotated[
        list[int] | None,
        typer.Option(help="concurrent clients of a latency phase (repeatable; default 1 50 500)"),
    ] = None,
    duration: Annotated[float, typer.Option(help="seconds of each latency phase")] = 2.0,
    warmup: Annotated[float, typer.Option(help="seconds of each phase not counted")] = 0.5,
    rounds: Annotated[
        int,
        typer.Option(help="direct and via the router in turn, this many times; medians count"),
    ] = 3,
    step_observe: Annotated[
        float, typer.Option(help="seconds the autoscaler phase runs after its 10x step")
    ] = 10.0,
    cold_start: Annotated[
        bool, typer.Option(help="time the embedding model's runtime until ready")
    ] = True,
    replica_link: Annotated[
        str,
        typer.Option(
            help="how the router reaches the replica: unix (a Unix socket, as kiban's model "
            "server under the local executor) or tcp (loopback TCP, as one on another host)"
        ),
    ] = "unix",
    as_json: JsonOpt = False,
) -> None:
    """The latency the serving router adds, the autoscaler's reaction, a model's cold start.

    1. closed-loop clients call an instant replica directly, then through the router (three
    processes), at each --clients, in turn for --rounds rounds: added = via router - direct,
    each the median over the rounds, p50 and p99 (the router reaches the replica as
    --replica-link says);

    2. the router and the autoscaler live, replicas started on demand, the load stepped up
    10x: time until more replicas are asked for and until the first new one serves;

    3. the embedding model's runtime from start to /v2/health/ready answering 200.
    """
    from kiban.serving.router import native

    native.activate()  # measured compiled, as kiban up runs it, where a build exists
    from kiban.bench.loadgen import BenchError
    from kiban.bench.router import router_table, run_router_bench
    from kiban.bench.router_options import RouterBenchOptions

    options = checked(
        RouterBenchOptions,
        clients=tuple(clients) if clients else (1, 50, 500),
        duration_s=duration,
        warmup_s=warmup,
        rounds=rounds,
        step_observe_s=step_observe,
        cold_start=cold_start,
        replica_link=replica_link,
    )
    report(
        lambda: run_router_bench(options, say=render.say),
        (BenchError,),
        router_table,
        as_json,
        "interrupted; the benchmark's processes are stopped",
    )
