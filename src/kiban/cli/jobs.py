"""The job commands: ``submit`` and ``run`` jobs, look at them (``ls``, ``describe``, ``logs``),
``wait`` for them, ``cancel`` them, and record a ``checkpoint``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click.core import Context as ClickContext
from typer.core import TyperCommand

from kiban.cli import complete
from kiban.cli.connection import client
from kiban.cli.failure import fail
from kiban.cli.manifest_files import read_text
from kiban.cli.output import Output, OutputOpt, print_document
from kiban.sdk.errors import ApiError

if TYPE_CHECKING:
    from rich.console import RenderableType

    from kiban.sdk.client import Client

job_commands = typer.Typer()
"""The job commands (the ``kiban`` app loads each from here when it is called)."""

JobIdArg = Annotated[str, typer.Argument(help="job id", autocompletion=complete.job_ids)]
WatchOpt = Annotated[
    bool, typer.Option("--watch", "-w", help="show it again when it changes, until Ctrl-C")
]
IntervalOpt = Annotated[float, typer.Option(help="with --watch: seconds between looks", min=0.2)]


class RunCommand(TyperCommand):
    """``kiban run``'s parsing: an unknown option before the command is refused naming the
    nearest known one, rather than listed among "possible options"."""

    def parse_args(self, ctx: ClickContext, args: list[str]) -> list[str]:
        from typer._click.exceptions import NoSuchOption, UsageError

        try:
            return super().parse_args(ctx, args)
        except NoSuchOption as exc:
            import difflib

            known = [o for p in self.params for o in (*p.opts, *p.secondary_opts)]
            known = [o for o in known if o.startswith("-")]
            nearest = difflib.get_close_matches(exc.option_name, known, n=1, cutoff=0.5)
            hint = (
                f"did you mean {nearest[0]}?"
                if nearest
                else "kiban's options come first (kiban run --help); the command follows --"
            )
            raise UsageError(
                f"no such option {exc.option_name}; {hint} (nothing was submitted)", ctx
            ) from None


def submitted(job: dict[str, Any]) -> None:
    """The job id alone on stdout; where it went, and any warnings, on stderr."""
    from kiban.cli import render
    from kiban.cli.arrays import is_array, submitted_line

    print(job["id"])
    said = (
        submitted_line(job)
        if is_array(job)
        else f"job {job['id']} submitted to queue {job['queue']}"
    )
    render.err.print(said, markup=False)
    for warning in job.get("warnings") or []:
        render.err.print(f"warning: {warning}", markup=False, highlight=False)


@job_commands.command()
def submit(
    file: Annotated[str, typer.Argument(help="job manifest (YAML or JSON); - for stdin")],
) -> None:
    """Submit a job manifest; prints the job id alone on stdout.

    The job runs in the directory it was submitted from unless `spec.workingDir` says
    otherwise; with no `spec.queue`, in `$KIBAN_QUEUE`, else your tenant's queue."""
    text = read_text(file)
    with client() as api:
        job = api.submit(text)
    submitted(job)


@job_commands.command(cls=RunCommand, context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[
        list[str],
        typer.Argument(
            help="the command: what follows --, or the first word that is not an option "
            "and everything after it",
            show_default=False,
        ),
    ],
    name: Annotated[
        str | None, typer.Option(help="job name (default: the script's or program's)")
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            help="queue to submit to (default: $KIBAN_QUEUE, else your tenant's queue)",
            autocompletion=complete.queue_names,
        ),
    ] = None,
    nodes: Annotated[
        int,
        typer.Option(
            help="replicas, one per node: with 2 or more, no two share a node "
            "(maxReplicasPerNode: 1), and the job waits until that many nodes can take one",
            min=1,
        ),
    ] = 1,
    gpus_per_node: Annotated[
        int, typer.Option("--gpus-per-node", "--gpus", help="GPUs per replica", min=0)
    ] = 0,
    cpus: Annotated[float, typer.Option(help="CPUs per replica")] = 1.0,
    memory: Annotated[str, typer.Option(help="memory per replica, e.g. 4Gi")] = "1Gi",
    priority: Annotated[str | None, typer.Option(help="priority class")] = None,
    launcher: Annotated[str, typer.Option(help="torchrun or none")] = "none",
    max_runtime: Annotated[str | None, typer.Option(help="e.g. 2h")] = None,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", "-e", help="KEY=VALUE in the job's environment (repeatable)"),
    ] = None,
    export: Annotated[
        str | None,
        typer.Option(
            help="variables of this shell the job gets: NONE (the default), ALL (all but "
            "secrets and KIBAN_*), or NAME,NAME=VALUE,... (ALL,NAME=VALUE also works)"
        ),
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            help="a job array: one job per index, INDICES[%PARALLELISM] (0-99%8: indices 0 to "
            "99, at most 8 at once); each gets KIBAN_ARRAY_INDEX and KIBAN_ARRAY_JOB_ID"
        ),
    ] = None,
    after: Annotated[
        list[str] | None,
        typer.Option(
            help="start only after job (or array) ID ends: ID[:ok|notok|any], ok (succeeded) "
            "by default (repeatable)"
        ),
    ] = None,
) -> None:
    """Run a command as a job: ``kiban run --nodes 2 --gpus-per-node 4 -- torchrun train.py``.

    kiban's options come first; the command starts after `--`, or at the first word that is
    not an option (`kiban run --gpus 1 python train.py --lr 3`: `--lr` is the script's). A
    misspelled option is refused, and nothing is submitted."""
    from kiban.cli import render
    from kiban.cli.environment import job_environment
    from kiban.cli.jobdoc import run_document

    environment = job_environment(export, env or [], os.environ)
    if environment.withheld:
        render.err.print(
            "warning: --export ALL left out "
            + ", ".join(environment.withheld)
            + " (secrets, and kiban's own); name one in --export or --env to send it",
            markup=False,
            highlight=False,
        )
    document = run_document(
        command,
        name=name,
        queue=queue,
        nodes=nodes,
        gpus=gpus_per_node,
        cpus=cpus,
        memory=memory,
        priority=priority,
        launcher=launcher,
        max_runtime=max_runtime,
        env=environment.variables,
    )
    from kiban.cli.arrays import add_relations

    add_relations(document, array, after or [])
    with client() as api:
        job = api.submit(document)
    submitted(job)


@job_commands.command("ls")
def list_jobs(
    output: OutputOpt = Output.TABLE,
    state: Annotated[
        list[str] | None, typer.Option(help="filter by state, in any case (repeatable)")
    ] = None,
    queue: Annotated[
        str | None, typer.Option(help="filter by queue", autocompletion=complete.queue_names)
    ] = None,
    limit: Annotated[int, typer.Option(help="at most this many")] = 100,
    watch: WatchOpt = False,
    interval: IntervalOpt = 2.0,
) -> None:
    """List jobs, newest first; a waiting job's reason and forecast start (ETA). An array is
    one line: its indices counted by state (``kiban describe ARRAY`` shows them)."""
    from kiban.cli import render
    from kiban.cli.arrays import folded

    with client() as api:

        def fetch() -> list[dict[str, Any]]:
            return folded(api, state=state, queue=queue, limit=limit)

        def show(jobs: list[dict[str, Any]]) -> RenderableType:
            return render.jobs_table(jobs, wide=output is Output.WIDE)

        if watch:
            from kiban.cli.watch import watch as watching

            watching(fetch, show, output=output, interval=interval)
            return
        jobs = fetch()
    if output.structured:
        print_document(jobs, output)
    else:
        render.out.print(show(jobs), soft_wrap=True)


@job_commands.command()
def describe(
    target: Annotated[
        str,
        typer.Argument(
            help="a job id, `service` or `node`", autocompletion=complete.describe_targets
        ),
    ],
    name: Annotated[
        str | None,
        typer.Argument(help="the service's or node's name", autocompletion=complete.describe_names),
    ] = None,
    output: OutputOpt = Output.TABLE,
    watch: WatchOpt = False,
    interval: IntervalOpt = 2.0,
) -> None:
    """A job's spec, state, placement, pending reason, positions, forecast start, its tenant's
    standing, preemptor, last checkpoint and events (of an array's id: its indices by
    state); as ``describe service NAME``, a service's revisions, replicas, traffic split,
    latency and URL; as ``describe node NAME``, a node's capacity, use, cordon, agent, health
    checks, latest GPU readings, their history and the remediation actions taken. ``-o
    wide`` adds the manifest as stored (a node: its whole history)."""
    from kiban.cli import render

    if target == "node":
        if name is None:
            fail("name the node: kiban describe node NAME")
        from kiban.cli.node_view import fetch_node, node_description

        node_name = name
        described(
            lambda api: fetch_node(api, node_name),
            lambda found: node_description(found, wide=output is Output.WIDE),
            output=output,
            watch=watch,
            interval=interval,
        )
        return

    if target in ("service", "svc"):
        if name is None:
            fail("name the service: kiban describe service NAME")
        service_name = name
        from kiban.cli.serving import describe_service

        def fetch_service(api: Client) -> dict[str, Any]:
            return {**api.service(service_name), "events": api.service_events(service_name)}

        def show_service(found: dict[str, Any]) -> RenderableType:
            return describe_service(found, found["events"], wide=output is Output.WIDE)

        described(fetch_service, show_service, output=output, watch=watch, interval=interval)
        return
    if name is not None:
        if target != "job":
            fail(
                f"describe takes a job id, `job ID`, `service NAME` or `node NAME`, not {target!r}"
            )
        target = name
    job_id = target

    from kiban.cli import arrays

    def fetch_job(api: Client) -> dict[str, Any]:
        try:
            return api.describe(job_id)
        except ApiError as exc:
            if not arrays.not_found(exc):
                raise
            return arrays.array_instead(api, job_id, exc, indices=True)

    def show_job(job: dict[str, Any]) -> RenderableType:
        if arrays.is_array(job):
            return arrays.description(job)
        return render.job_description(job, job["events"], wide=output is Output.WIDE)

    described(fetch_job, show_job, output=output, watch=watch, interval=interval)


def described(
    fetch: Callable[[Client], dict[str, Any]],
    show: Callable[[dict[str, Any]], RenderableType],
    *,
    output: Output,
    watch: bool,
    interval: float,
) -> None:
    """Print one description (``fetch(api)`` shown by ``show``), or keep it shown."""
    from kiban.cli import render

    with client() as api:
        if watch:
            from kiban.cli.watch import watch as watching

            watching(lambda: fetch(api), show, output=output, interval=interval)
            return
        found = fetch(api)
    if output.structured:
        print_document(found, output)
    else:
        render.out.print(show(found))


@job_commands.command()
def logs(
    job_id: JobIdArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="stream until the job ends")
    ] = False,
    rank: Annotated[int, typer.Option(help="which replica")] = 0,
    all_ranks: Annotated[
        bool, typer.Option("--all-ranks", help="every replica's lines, each after [rank R]")
    ] = False,
    tail: Annotated[int | None, typer.Option(help="only the last N lines", min=0)] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="only lines written since: a duration (10m, 2h, 1d) or a time "
            "(2024-05-01T10:00, 10:00; local time unless it has an offset)"
        ),
    ] = None,
    timestamps: Annotated[
        bool, typer.Option("--timestamps", help="each line after its time (RFC 3339, UTC)")
    ] = False,
) -> None:
    """A replica's output (rank 0 unless told) on stdout; where it ran on stderr.

    A job that never started has none: that is said, and the exit code is 1.
    """
    from kiban.cli.logs import parse_since, show_logs

    try:
        since_at = None if since is None else parse_since(since)
    except ValueError as exc:
        fail(f"--since: {exc}")
    with client() as api:
        code = show_logs(
            api,
            job_id,
            rank=rank,
            follow=follow,
            all_ranks=all_ranks,
            tail=tail,
            since=since_at,
            timestamps=timestamps,
        )
    if code:
        raise typer.Exit(code)


@job_commands.command()
def wait(
    job_id: Annotated[
        str, typer.Argument(help="job id", autocompletion=complete.unfinished_job_ids)
    ],
    timeout: Annotated[float | None, typer.Option(help="give up after this many seconds")] = None,
) -> None:
    """Wait for a job to finish; exit 0 only if it succeeded (2 if the timeout came first). For
    an array: until every index has ended; exit 0 only if every index succeeded."""
    from rich.markup import escape

    from kiban.cli import arrays, render

    with client() as api, render.err.status(f"waiting for {escape(job_id)}") as status:

        def progress(job: dict[str, Any]) -> None:
            detail = f": {job['reason']['code']}" if job.get("reason") else ""
            running = f" ({render.duration(job)} running)" if job.get("startedAt") else ""
            status.update(escape(f"{job_id}: {job['state']}{detail}{running}"))

        def array_progress(found: dict[str, Any]) -> None:
            status.update(escape(f"array {job_id}: {arrays.counts_text(found['counts'])}"))

        try:
            try:
                job = api.wait(job_id, timeout=timeout, interval=0.25, progress=progress)
            except ApiError as exc:
                if not arrays.not_found(exc):
                    raise
                arrays.array_instead(api, job_id, exc)
                job = api.wait_array(
                    job_id, timeout=timeout, interval=0.25, progress=array_progress
                )
        except TimeoutError as exc:
            fail(str(exc), code=2)
    if arrays.is_array(job):
        render.err.print(escape(f"array {job_id}: {arrays.counts_text(job['counts'])}"))
        if not job["succeeded"]:
            raise typer.Exit(1)
        return
    message = f" ({job['message']})" if job.get("message") else ""
    render.err.print(escape(f"job {job_id} {job['state']}{message}"))
    if job["state"] != "Succeeded":
        raise typer.Exit(1)


@job_commands.command()
def cancel(
    job_ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="job ids (or choose jobs with the filters)",
            autocompletion=complete.unfinished_job_ids,
            show_default=False,
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(help="jobs of this queue", autocompletion=complete.queue_names),
    ] = None,
    state: Annotated[
        list[str] | None,
        typer.Option(help="jobs in this state, any case (repeatable; default: not ended)"),
    ] = None,
    name: Annotated[str | None, typer.Option(help="jobs of this name")] = None,
    mine: Annotated[
        bool, typer.Option("--mine", help="jobs submitted with your token's name (whoami)")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="do not ask when filters choose several jobs")
    ] = False,
) -> None:
    """Cancel jobs: running replicas get SIGTERM, then SIGKILL after the grace period. An
    array's id cancels every index of it that has not ended.

    Give job ids, or filters that choose them (`--queue`, `--state`, `--name`, `--mine`,
    together: all must match); when filters choose more than one job, kiban asks first (or
    wants `--yes` when it cannot ask). Exits 1 if any job could not be cancelled."""
    from rich.markup import escape

    from kiban.cli import render
    from kiban.cli.selection import FilterChoice, choose_jobs, confirm_many

    filters = FilterChoice(queue=queue, states=tuple(state or ()), name=name, mine=mine)
    if job_ids and filters.any:
        fail("give job ids or filters (--queue, --state, --name, --mine), not both")
    if not job_ids and not filters.any:
        fail("which jobs? give their ids, or filters: --queue, --state, --name, --mine")
    failed = 0
    with client() as api:
        if not job_ids:
            chosen = choose_jobs(api, filters)
            if not chosen:
                render.err.print(escape(f"no job matches {filters.described}"))
                return
            if len(chosen) > 1 and not yes:
                confirm_many(chosen, filters)
            job_ids = [j["id"] for j in chosen]
        from kiban.cli import arrays

        for job_id in job_ids:
            try:
                try:
                    job = api.cancel(job_id)
                except ApiError as exc:
                    if not arrays.not_found(exc):
                        raise
                    arrays.array_instead(api, job_id, exc)
                    done = api.cancel_array(job_id)
                    render.err.print(
                        escape(f"array {job_id}: {arrays.counts_text(done['counts'])}")
                    )
                    continue
            except ApiError as exc:
                failed += 1
                render.err.print(f"[red]error:[/red] {escape(exc.message)}", highlight=False)
                continue
            render.err.print(escape(f"job {job_id}: {job['state']}"))
    if failed:
        raise typer.Exit(1)


@job_commands.command()
def checkpoint(
    job_id: Annotated[
        str | None,
        typer.Argument(
            help="job id (default: $KIBAN_JOB_ID, inside a job)", autocompletion=complete.job_ids
        ),
    ] = None,
) -> None:
    """Report that a running job saved a checkpoint now (preemption prefers jobs that lose less)."""
    from rich.markup import escape

    from kiban.cli import render

    job_id = job_id or os.environ.get("KIBAN_JOB_ID")
    if not job_id:
        fail("which job? give its id, or run this inside a job (KIBAN_JOB_ID is not set)")
    with client() as api:
        job = api.checkpoint(job_id)
    render.err.print(
        escape(f"job {job_id}: checkpoint recorded at {render.when(job['lastCheckpointAt'])}")
    )
