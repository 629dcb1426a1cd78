"""``kiban bench``: benchmarks that start their own servers and say on what they ran."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console

from kiban.cli import render

bench_app = typer.Typer(
    help="Benchmarks: each starts its own kiban servers and throwaway stores.",
    no_args_is_help=True,
)


@bench_app.command("submit")
def submit(
    clients: Annotated[int, typer.Option(help="concurrent clients (keep-alive connections)")] = 32,
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
        typer.Option(help="sqlite and/or postgresql (repeatable; default both)"),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
    ] = False,
) -> None:
    """Submissions/s and latency with concurrent clients, and submission to running.

    Each store (SQLite, PostgreSQL) and each phase gets a fresh `kiban up` subprocess:

    1. submit to running: one job at a time, POST to process spawned, on an idle server;

    2. latency at --rate submissions/s offered (open loop, timed from when each was due);

    3. the most submissions/s that --clients clients submitting back to back get.
    """
    from kiban.bench.report import report_table
    from kiban.bench.submit import BenchError, SubmitBenchOptions, run_submit_bench

    try:
        options = SubmitBenchOptions(
            clients=clients,
            duration_s=duration,
            jobs=jobs,
            rate=rate,
            running_jobs=running_jobs,
            stores=tuple(store) if store else ("sqlite", "postgresql"),
        )
    except ValueError as exc:
        render.err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    try:
        report = run_submit_bench(options, say=lambda line: render.err.print(line, markup=False))
    except BenchError as exc:
        render.err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        render.err.print("interrupted; the benchmark's servers are stopped", markup=False)
        raise typer.Exit(130) from None
    table = report_table(report)
    stream = sys.stderr if as_json else sys.stdout
    # Piped or logged, the table keeps its width rather than folding into 80 columns.
    console = Console(file=stream, highlight=False, width=None if stream.isatty() else 160)
    console.print(table)
    if as_json:
        sys.stdout.write(json.dumps(report, separators=(",", ":")) + "\n")
