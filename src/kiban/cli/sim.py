"""``kiban sim``: replay a cluster trace through the scheduler core in simulated time."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kiban.cli import render

if TYPE_CHECKING:
    from rich.table import Table

    from kiban.sim.run import SimReport


def sim_command(
    trace: Annotated[Path, typer.Option(help="the trace: philly_jobs_sia.csv or a generic CSV")],
    fmt: Annotated[
        str | None, typer.Option("--format", help="philly or csv (default: from the header)")
    ] = None,
    cluster: Annotated[
        Path | None, typer.Option(help="a cluster file, as kiban up --config takes")
    ] = None,
    nodes: Annotated[int | None, typer.Option(help="synthetic cluster: this many nodes")] = None,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs of each synthetic node")] = 8,
    quotas_from: Annotated[
        Path | None,
        typer.Option(help="per-team node counts (team, nodes): quotas in one cohort"),
    ] = None,
    no_borrowing: Annotated[
        bool,
        typer.Option(
            "--no-borrowing",
            help="with --quotas-from: teams may not borrow idle quota (partitions, as in Helios)",
        ),
    ] = False,
    scale_quotas: Annotated[
        bool,
        typer.Option(
            "--scale-quotas",
            help="with --quotas-from: scale the teams' node counts to the simulated cluster",
        ),
    ] = False,
    policy: Annotated[
        str,
        typer.Option(
            help="kiban, fifo, sjf, srtf, las, drf, recommended, recommended-oracle, "
            "recommended-las"
        ),
    ] = "kiban",
    compare: Annotated[
        str | None, typer.Option(help="several policies side by side, e.g. fifo,sjf,kiban")
    ] = None,
    load: Annotated[float, typer.Option(help="divide inter-arrival times by this")] = 1.0,
    window: Annotated[
        str | None, typer.Option(help="START:END from the first submission, e.g. 7d:14d")
    ] = None,
    seed: Annotated[int, typer.Option(help="orders jobs submitted in the same second")] = 0,
    checkpoint_interval: Annotated[
        str, typer.Option(help="jobs checkpoint this often (0: never); preemption loses the rest")
    ] = "30m",
    no_rho: Annotated[
        bool, typer.Option("--no-rho", help="skip the per-tenant replays alone (rho is null)")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object (per policy with --compare)")
    ] = False,
    plot: Annotated[Path | None, typer.Option(help="write PNG plots into this folder")] = None,
    jobs_csv: Annotated[
        Path | None,
        typer.Option(help="write every job's outcome per policy to this CSV (one row each)"),
    ] = None,
) -> None:
    """Replay a trace through the same scheduler core as the control loop, in simulated time.

    Every arrival and end of a run is an event; all events of one instant make one cycle. A
    placed job runs its trace duration; a preempted one loses the work since its last
    checkpoint and resumes when placed again. Prints JCT, queueing, allocation, fairness (rho)
    and preemption figures per policy.
    """
    from kiban.domain.quantity import parse_duration
    from kiban.sim.run import SimOptions, policies_from, run_sim
    from kiban.sim.traces import TraceError, parse_window

    try:
        if fmt not in (None, "philly", "csv"):
            raise ValueError(f"--format must be philly or csv, not {fmt!r}")
        if jobs_csv is not None and jobs_csv.is_dir():
            raise ValueError(f"--jobs-csv must name a file, and {jobs_csv} is a folder")
        options = SimOptions(
            trace=trace,
            fmt=fmt,  # type: ignore[arg-type]
            cluster_file=cluster,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            quotas_from=quotas_from,
            borrowing=not no_borrowing,
            scale_quotas=scale_quotas,
            policies=policies_from(compare, policy),
            load=load,
            window=parse_window(window) if window else (None, None),
            seed=seed,
            checkpoint_s=parse_duration(checkpoint_interval),
            rho=not no_rho,
            series=plot is not None,
        )
    except ValueError as exc:
        render.err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None

    report = render.run_or_exit(lambda: run_sim(options, say=render.say), (TraceError, ValueError))
    console = render.report_console(as_json)
    console.print(sim_table(report))
    for note in report.prepared.notes:
        console.print(f"note: {note}", markup=False)
    for result in report.results:
        if result.error is not None:
            console.print(f"error: {result.policy.name}: {result.error}", markup=False)
            continue
        if "estimate_mdape_percent" in result.summary.extra:
            mdape = result.summary.extra["estimate_mdape_percent"]
            checked = result.summary.extra["estimates_checked"]
            console.print(
                f"note: {result.policy.name}: run-time estimates learned in the replay were off by "
                f"{'-' if mdape is None else f'{mdape}%'} (median, over {checked:,} checked)",
                markup=False,
            )
        loops = result.summary.extra["preemption_loops"]
        if loops:
            console.print(
                f"warning: {result.policy.name}: at {loops:,} instants the core preempted the "
                "same jobs for the same preemptors again (a preemption loop); the replay moved on",
                markup=False,
            )
    if plot is not None:
        from kiban.sim.plots import write_plots

        try:
            for path in write_plots(report.results, plot):
                render.say(f"wrote {path}")
        except RuntimeError as exc:
            render.err.print(f"error: {exc}", markup=False)
            raise typer.Exit(1) from None
    if jobs_csv is not None:
        from kiban.sim.job_outcomes import write_job_outcomes

        replays = [(r.policy.name, r.outcome) for r in report.results if r.outcome is not None]
        try:
            written = write_job_outcomes(replays, jobs_csv)
        except OSError as exc:
            render.err.print(f"error: --jobs-csv: {exc}", markup=False)
            raise typer.Exit(1) from None
        render.say(f"wrote {written:,} job rows to {jobs_csv}")
    if as_json:
        data: dict[str, Any]
        if compare is None:
            data = report.results[0].summary.as_json()
        else:
            data = {r.policy.name: r.summary.as_json() for r in report.results}
        render.json_line(data)


_ROWS = (
    ("jobs", "jobs completed", "{:,}"),
    ("avg_jct_s", "average JCT (s)", "{:,.0f}"),
    ("median_jct_s", "median JCT (s)", "{:,.0f}"),
    ("p99_jct_s", "p99 JCT (s)", "{:,.0f}"),
    ("avg_queue_s", "average queueing (s)", "{:,.0f}"),
    ("p99_queue_s", "p99 queueing (s)", "{:,.0f}"),
    ("makespan_s", "makespan (s)", "{:,.0f}"),
    ("gpu_allocation", "GPU allocation", "{:.1%}"),
    ("max_rho", "max rho", "{:.2f}"),
    ("median_rho", "median rho", "{:.2f}"),
    ("preemptions", "preemptions", "{:,}"),
    ("lost_gpu_hours", "GPU-hours lost", "{:,.1f}"),
    ("wall_s", "replay wall time (s)", "{:.1f}"),
)


def sim_table(report: SimReport) -> Table:
    """Policies as columns, the figures as rows; settings in the title."""
    from rich.table import Table

    settings = report.settings
    title = (
        f"kiban sim: {settings['jobs']:,} jobs of {settings['trace']}, load x{settings['load']:g}"
        f"\n{settings['cluster']}"
    )
    table = Table(title=title, title_justify="left", header_style="bold")
    table.add_column("figure")
    for result in report.results:
        table.add_column(result.policy.name, justify="right")
    for key, label, form in _ROWS:
        cells = []
        for result in report.results:
            value = result.summary.figures[key]
            cells.append("-" if value is None else form.format(value))
        table.add_row(label, *cells)
    never = [r.summary.extra["never_started"] for r in report.results]
    if any(never):
        table.add_row("jobs never started", *(f"{n:,}" for n in never))
    return table
