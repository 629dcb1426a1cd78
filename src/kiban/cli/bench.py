"""``kiban bench``: benchmarks that start their own servers and say on what they ran."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from kiban.cli import render

if TYPE_CHECKING:
    from rich.console import RenderableType

bench_app = typer.Typer(
    rich_markup_mode=render.HELP_MARKUP,
    help="Benchmarks: each starts its own kiban servers and throwaway stores.",
    no_args_is_help=True,
)


def _bad_option(problem: ValueError) -> NoReturn:
    """A benchmark's options refused: the problem on one line, exit 2 (nothing ran)."""
    render.err.print(f"error: {problem}", markup=False)
    raise typer.Exit(2) from None


def _report(
    run: Callable[[], dict[str, Any]],
    errors: tuple[type[Exception], ...],
    table: Callable[[dict[str, Any]], RenderableType],
    as_json: bool,
    interrupted: str = "interrupted",
) -> None:
    """What every benchmark does with its run: its errors and Ctrl-C end it with one line; its
    table on stdout, or on stderr with ``--json``, which prints the report as one JSON line."""
    report = render.run_or_exit(run, errors, interrupted)
    render.report_console(as_json).print(table(report))
    if as_json:
        render.json_line(report)


def client_counts(text: str) -> tuple[int, ...]:
    """``--clients 4,16,64`` as (4, 16, 64); a clear error naming the option otherwise."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"--clients must be a number or numbers like 4,16,64; got {text!r}"
        ) from None
    if any(c < 1 for c in counts):
        raise ValueError(f"--clients must be positive; got {text!r}")
    return counts


@bench_app.command("submit")
def submit(
    clients: Annotated[
        str,
        typer.Option(
            help="concurrent clients (keep-alive connections); with --sustained, a list: 4,16,64"
        ),
    ] = "32",
    jobs: Annotated[
        int | None,
        typer.Option(help="submissions per load phase, instead of a duration"),
    ] = None,
    duration: Annotated[float, typer.Option(help="seconds of each load phase")] = 10.0,
    rate: Annotated[
        float, typer.Option(help="offered submissions/s for the latency measurement")
    ] = 500.0,
    running_jobs: Annotated[
        int, typer.Option(help="jobs for the submit-to-running measurement")
    ] = 50,
    store: Annotated[
        list[str] | None,
        typer.Option(
            help="sqlite and/or postgresql (repeatable; default both; --sustained: one, sqlite)"
        ),
    ] = None,
    sustained: Annotated[
        float | None,
        typer.Option(
            help="instead: seconds of back-to-back submissions per client count, with --pending "
            "jobs waiting and without, side by side"
        ),
    ] = None,
    pending: Annotated[
        int, typer.Option(help="with --sustained: jobs pending in the store before it starts")
    ] = 50_000,
    watch: Annotated[
        float,
        typer.Option(help="with --sustained: also GET /api/v1/queues every this many seconds"),
    ] = 0.0,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
    array: Annotated[
        int | None,
        typer.Option(
            help="instead: time to accept an array of this many indices and to schedule its "
            "first --scheduled, against as many single jobs (--clients), side by side"
        ),
    ] = None,
    scheduled: Annotated[
        int, typer.Option(help="with --array: how many jobs to wait for to be scheduled")
    ] = 1000,
    audit_compare: Annotated[
        bool,
        typer.Option(
            "--audit-compare/--no-audit-compare",
            help="also step 3 on servers without the audit log (kiban up --no-audit), side by "
            "side: submissions/s with it over without",
        ),
    ] = True,
) -> None:
    """Submissions/s and latency with concurrent clients, and submission to running.

    Each store (SQLite, PostgreSQL) and each phase gets a fresh `kiban up` subprocess:

    1. submit to running: one job at a time, POST to process spawned, on an idle server;

    2. latency at --rate submissions/s offered (open loop, timed from when each was due);

    3. the most submissions/s that --clients clients submitting back to back get;

    4. what the audit log costs: step 3 without it (`kiban up --no-audit`) twice and with it
    once more (ABBA); submissions/s with it over without (goal: at least 0.9).

    With `--sustained SECONDS`: for each of `--clients 4,16,64`, a server whose store holds
    `--pending` waiting jobs (every node cordoned) and one with an empty store, each taking
    back-to-back submissions for SECONDS: submissions/s and p99, side by side (`--watch 1`:
    while someone reads the queues every second).

    With `--array N`: an array of N indices (one POST) against N single jobs, each on a fresh
    server: time to accept them all, and until the first `--scheduled` have started.
    """
    from kiban.bench.report import report_table
    from kiban.bench.submit import BenchError, SubmitBenchOptions, run_submit_bench

    if array is not None:
        _array(array, scheduled, clients, store, as_json)
        return
    if sustained is not None:
        _sustained(clients, sustained, pending, watch, store, as_json)
        return
    try:
        counts = client_counts(clients)
        if len(counts) != 1:
            raise ValueError("--clients takes one number unless --sustained is given")
        options = SubmitBenchOptions(
            clients=counts[0],
            duration_s=duration,
            jobs=jobs,
            rate=rate,
            running_jobs=running_jobs,
            stores=tuple(store) if store else ("sqlite", "postgresql"),
            audit_compare=audit_compare,
        )
    except ValueError as exc:
        _bad_option(exc)
    _report(
        lambda: run_submit_bench(options, say=render.say),
        (BenchError,),
        report_table,
        as_json,
        "interrupted; the benchmark's servers are stopped",
    )


def _array(size: int, scheduled: int, clients: str, store: list[str] | None, as_json: bool) -> None:
    """``bench submit --array N``: see ``kiban.bench.array_submit``."""
    from kiban.bench.array_submit import ArrayBenchOptions, array_table, run_array_bench
    from kiban.bench.loadgen import BenchError

    try:
        counts = client_counts(clients)
        if len(counts) != 1:
            raise ValueError("--clients takes one number with --array")
        options = ArrayBenchOptions(
            size=size,
            scheduled=scheduled,
            clients=counts[0],
            stores=tuple(store) if store else ("sqlite",),
        )
    except ValueError as exc:
        _bad_option(exc)
    _report(
        lambda: run_array_bench(options, say=render.say),
        (BenchError,),
        array_table,
        as_json,
        "interrupted; the benchmark's servers are stopped",
    )


def _sustained(
    clients: str,
    seconds: float,
    pending: int,
    watch: float,
    store: list[str] | None,
    as_json: bool,
) -> None:
    """``bench submit --sustained``: see ``kiban.bench.sustained``."""
    from kiban.bench.loadgen import BenchError
    from kiban.bench.sustained import SustainedOptions, run_sustained_bench, sustained_table

    try:
        if store and len(store) > 1:
            raise ValueError("--sustained runs on one store: give --store once")
        options = SustainedOptions(
            duration_s=seconds,
            clients=client_counts(clients),
            pending=pending,
            watch_s=watch,
            store=store[0] if store else "sqlite",
        )
    except ValueError as exc:
        _bad_option(exc)
    _report(
        lambda: run_sustained_bench(options, say=render.say),
        (BenchError,),
        sustained_table,
        as_json,
        "interrupted; the benchmark's servers are stopped",
    )


@bench_app.command("scheduler")
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
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
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

    try:
        options = SchedulerBenchOptions(
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
    except ValueError as exc:
        _bad_option(exc)
    _report(
        lambda: run_scheduler_bench(options, say=render.say),
        (BenchError,),
        scheduler_table,
        as_json,
    )


@bench_app.command("control")
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
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
) -> None:
    """The service controller's and the control loop's pass times with many running jobs and
    services, and how long a cancel or settling transaction waits while a probe hangs.

    With --against, the same run on another checkout (e.g. before a change), with ratios.
    """
    from kiban.bench.control import ControlBenchOptions, control_table, run_control_bench

    try:
        options = ControlBenchOptions(
            running=running,
            services=services,
            passes=passes,
            hang_s=hang,
            against=against,
            rounds=rounds,
        )
    except ValueError as exc:
        _bad_option(exc)
    _report(
        lambda: run_control_bench(options, say=render.say),
        (RuntimeError,),
        control_table,
        as_json,
    )


@bench_app.command("health")
def health(
    nodes: Annotated[int, typer.Option(help="virtual nodes, each with an agent reporting")] = 1024,
    interval: Annotated[float, typer.Option(help="seconds between a node's checks")] = 5.0,
    faults: Annotated[int, typer.Option(help="nodes that get a GPU fault")] = 32,
    intervals: Annotated[int, typer.Option(help="check intervals simulated")] = 4,
    seed: Annotated[int, typer.Option(help="seed of the faults' nodes and times")] = 0,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
) -> None:
    """From a GPU fault in a reading to its node cordoned and its jobs requeued (p50/p99), on
    many virtual nodes; the /metrics render and the agent's CPU per check where measured."""
    from kiban.bench.health import HealthBenchOptions, health_table, run_health_bench

    try:
        options = HealthBenchOptions(
            nodes=nodes, interval_s=interval, faults=faults, intervals=intervals, seed=seed
        )
    except ValueError as exc:
        _bad_option(exc)
    _report(lambda: run_health_bench(options), (RuntimeError,), health_table, as_json)


@bench_app.command("kube")
def kube(
    nodes: Annotated[int, typer.Option(help="fake 8-GPU nodes of the local control plane")] = 1_000,
    pods: Annotated[int, typer.Option(help="pods of each phase")] = 1_000,
    gpus_per_pod: Annotated[int, typer.Option(help="GPUs of each pod (1 to 8, or 0)")] = 8,
    workers: Annotated[
        int, typer.Option(help="requests in flight when the bench itself creates pods")
    ] = 8,
    timeout: Annotated[float, typer.Option(help="at most this many seconds per phase")] = 600.0,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
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

    try:
        options = KubeBenchOptions(
            nodes=nodes,
            pods=pods,
            gpus_per_pod=gpus_per_pod,
            workers=workers,
            phase_timeout_s=timeout,
        )
    except ValueError as exc:
        _bad_option(exc)
    _report(
        lambda: run_kube_bench(options, say=render.say),
        (BenchError, KubeBinariesMissing),
        kube_table,
        as_json,
        "interrupted; the control plane is stopped",
    )


@bench_app.command("router")
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
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
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

    try:
        options = RouterBenchOptions(
            clients=tuple(clients) if clients else (1, 50, 500),
            duration_s=duration,
            warmup_s=warmup,
            rounds=rounds,
            step_observe_s=step_observe,
            cold_start=cold_start,
            replica_link=replica_link,
        )
    except ValueError as exc:
        _bad_option(exc)
    _report(
        lambda: run_router_bench(options, say=render.say),
        (BenchError,),
        router_table,
        as_json,
        "interrupted; the benchmark's processes are stopped",
    )


@bench_app.command("cli")
def cli(
    runs: Annotated[int, typer.Option(help="timed runs of each command")] = 20,
    jobs: Annotated[int, typer.Option(help="jobs that kiban ls lists")] = 100,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
) -> None:
    """How long the CLI takes to answer: `kiban --version`, `kiban ls` and `kiban describe`,
    beside `python -c pass` (the floor), p50 and p99.

    Starts its own `kiban up` with --jobs waiting jobs; runs the four commands in turn, --runs
    times, as processes (wall time from spawn to exit). Goal: `kiban ls` p50 at most 0.2 s and
    at most 0.15 s above the floor.
    """
    from kiban.bench.cli import CliBenchOptions, cli_table, run_cli_bench
    from kiban.bench.loadgen import BenchError

    try:
        options = CliBenchOptions(runs=runs, jobs=jobs)
    except ValueError as exc:
        _bad_option(exc)
    _report(
        lambda: run_cli_bench(options, say=render.say),
        (BenchError,),
        cli_table,
        as_json,
        "interrupted; the benchmark's server is stopped",
    )


@bench_app.command("api")
def api(
    burst: Annotated[
        int, typer.Option(help="requests opened at once by one member: half lists, half follows")
    ] = 1000,
    give_up: Annotated[
        float, typer.Option(help="seconds after which a request without an answer is unanswered")
    ] = 30.0,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
) -> None:
    """A burst of simultaneous requests from one member against a fresh server: how many were
    answered (2xx or 503), how fast, and /healthz meanwhile, beside /healthz idle.

    1. a fresh `kiban up`, a member with 100 jobs held pending and one running job that prints;

    2. /healthz timed one request after another on the idle server;

    3. --burst requests opened at once (half `GET /jobs?limit=100`, half `logs?follow=true` of
    the running job), each timed to its whole answer (a follow to its status line), while
    /healthz is timed back to back and the admin's job is timed until it runs.
    """
    from kiban.bench.api_burst import ApiBenchOptions, api_table, run_api_bench
    from kiban.bench.loadgen import BenchError

    try:
        options = ApiBenchOptions(burst=burst, give_up_s=give_up)
    except ValueError as exc:
        _bad_option(exc)
    _report(
        lambda: run_api_bench(options, say=render.say),
        (BenchError,),
        api_table,
        as_json,
        "interrupted; the benchmark's server is stopped",
    )


@bench_app.command("web")
def web(
    jobs: Annotated[int, typer.Option(help="jobs in the store while the page is timed")] = 10_000,
    loads: Annotated[int, typer.Option(help="loads of the jobs page in headless Chromium")] = 7,
    list_samples: Annotated[
        int, typer.Option(help="requests of the list API (pages of 50 across the list)")
    ] = 200,
    ttfb_samples: Annotated[int, typer.Option(help="requests of GET /jobs for first byte")] = 50,
    kernel_samples: Annotated[
        int, typer.Option(help="kernel round trips through the notebook route, and as many direct")
    ] = 100,
    notebook: Annotated[
        bool, typer.Option(help="time the notebook route (starts a notebook: JupyterLab)")
    ] = True,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
) -> None:
    """The dashboard with many jobs: first byte and a rendered jobs page (headless Chromium),
    the list API behind it, and what the notebook route adds to a kernel round trip.

    1. a fresh `kiban up`; a member starts a notebook, and `execute_request` -> `execute_reply`
    is timed through `/nb/<tenant>/<name>/` and directly on its Jupyter, alternating;

    2. --jobs jobs submitted (one holds the GPU, the rest wait);

    3. GET /jobs to its first byte; the jobs page in Chromium from navigation start to its first
    job row; `GET /api/v1/jobs?limit=50&offset=...` across the list.
    """
    from kiban.bench.loadgen import BenchError
    from kiban.bench.web import WebBenchOptions, run_web_bench, web_table

    try:
        options = WebBenchOptions(
            jobs=jobs,
            loads=loads,
            list_samples=list_samples,
            ttfb_samples=ttfb_samples,
            kernel_samples=kernel_samples,
            notebook=notebook,
        )
    except ValueError as exc:
        _bad_option(exc)
    _report(
        lambda: run_web_bench(options, say=render.say),
        (BenchError,),
        web_table,
        as_json,
        "interrupted; the benchmark's server is stopped",
    )


@bench_app.command("usage")
def usage(
    records: Annotated[int, typer.Option(help="usage records written to each store")] = 1_000_000,
    since: Annotated[int, typer.Option(help="days the report looks back (--since Nd)")] = 90,
    days: Annotated[int, typer.Option(help="days the records are spread over")] = 100,
    rounds: Annotated[int, typer.Option(help="timed reports each way (medians shown)")] = 5,
    stores: Annotated[str, typer.Option(help="postgresql, sqlite or both")] = "postgresql,sqlite",
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
) -> None:
    """`kiban usage --by user --since 90d` over a million usage records: the report aggregated
    in the store, beside the same records folded in Python, on PostgreSQL and SQLite."""
    from kiban.bench.usage_query import UsageBenchOptions, run_usage_bench, usage_table

    try:
        options = UsageBenchOptions(
            records=records,
            days=days,
            since_days=since,
            rounds=rounds,
            stores=tuple(s.strip() for s in stores.split(",") if s.strip()),
        )
    except ValueError as exc:
        _bad_option(exc)
    _report(lambda: run_usage_bench(options, say=render.say), (RuntimeError,), usage_table, as_json)
