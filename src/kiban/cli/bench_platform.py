"""The benchmarks of the platform as users meet it, each against kiban servers of its own:
submissions (``bench submit``), a burst of API requests (``api``), the dashboard (``web``), the
CLI's start-up (``cli``) and the usage report (``usage``)."""

from __future__ import annotations

from typing import Annotated

import typer

from kiban.cli import render
from kiban.cli.bench_report import JsonOpt, bad_option, checked, client_counts, report

platform_benches = typer.Typer()
"""Mounted in ``kiban bench`` (``kiban.cli.bench``)."""


@platform_benches.command("submit")
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
    as_json: JsonOpt = False,
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
        bad_option(exc)
    report(
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
        bad_option(exc)
    report(
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
        bad_option(exc)
    report(
        lambda: run_sustained_bench(options, say=render.say),
        (BenchError,),
        sustained_table,
        as_json,
        "interrupted; the benchmark's servers are stopped",
    )


@platform_benches.command("cli")
def cli(
    runs: Annotated[int, typer.Option(help="timed runs of each command")] = 20,
    jobs: Annotated[int, typer.Option(help="jobs that kiban ls lists")] = 100,
    as_json: JsonOpt = False,
) -> None:
    """How long the CLI takes to answer: `kiban --version`, `kiban ls` and `kiban describe`,
    beside `python -c pass` (the floor), p50 and p99.

    Starts its own `kiban up` with --jobs waiting jobs; runs the four commands in turn, --runs
    times, as processes (wall time from spawn to exit). Goal: `kiban ls` p50 at most 0.2 s and
    at most 0.15 s above the floor.
    """
    from kiban.bench.cli import CliBenchOptions, cli_table, run_cli_bench
    from kiban.bench.loadgen import BenchError

    options = checked(CliBenchOptions, runs=runs, jobs=jobs)
    report(
        lambda: run_cli_bench(options, say=render.say),
        (BenchError,),
        cli_table,
        as_json,
        "interrupted; the benchmark's server is stopped",
    )


@platform_benches.command("api")
def api(
    burst: Annotated[
        int, typer.Option(help="requests opened at once by one member: half lists, half follows")
    ] = 1000,
    give_up: Annotated[
        float, typer.Option(help="seconds after which a request without an answer is unanswered")
    ] = 30.0,
    as_json: JsonOpt = False,
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

    options = checked(ApiBenchOptions, burst=burst, give_up_s=give_up)
    report(
        lambda: run_api_bench(options, say=render.say),
        (BenchError,),
        api_table,
        as_json,
        "interrupted; the benchmark's server is stopped",
    )


@platform_benches.command("web")
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
    as_json: JsonOpt = False,
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

    options = checked(
        WebBenchOptions,
        jobs=jobs,
        loads=loads,
        list_samples=list_samples,
        ttfb_samples=ttfb_samples,
        kernel_samples=kernel_samples,
        notebook=notebook,
    )
    report(
        lambda: run_web_bench(options, say=render.say),
        (BenchError,),
        web_table,
        as_json,
        "interrupted; the benchmark's server is stopped",
    )


@platform_benches.command("usage")
def usage(
    records: Annotated[int, typer.Option(help="usage records written to each store")] = 1_000_000,
    since: Annotated[int, typer.Option(help="days the report looks back (--since Nd)")] = 90,
    days: Annotated[int, typer.Option(help="days the records are spread over")] = 100,
    rounds: Annotated[int, typer.Option(help="timed reports each way (medians shown)")] = 5,
    stores: Annotated[str, typer.Option(help="postgresql, sqlite or both")] = "postgresql,sqlite",
    as_json: JsonOpt = False,
) -> None:
    """`kiban usage --by user --since 90d` over a million usage records: the report aggregated
    in the store, beside the same records folded in Python, on PostgreSQL and SQLite."""
    from kiban.bench.usage_query import UsageBenchOptions, run_usage_bench, usage_table

    options = checked(
        UsageBenchOptions,
        records=records,
        days=days,
        since_days=since,
        rounds=rounds,
        stores=tuple(s.strip() for s in stores.split(",") if s.strip()),
    )
    report(lambda: run_usage_bench(options, say=render.say), (RuntimeError,), usage_table, as_json)
