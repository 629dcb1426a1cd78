"""``kiban``: run the platform, submit and watch jobs, look at queues and nodes.

Start-up is kept short (``kiban bench cli`` measures it): this module and the command modules
import only Typer and small things; each command imports what it needs when it runs (the HTTP
client and Rich for ``kiban ls``; the manifest models, the server, the benchmarks only where
they are used). ``tests/cli/test_startup.py`` checks what ``kiban ls`` imports.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click.core import Context as ClickContext
from typer.core import TyperCommand

from kiban.api.limits import AdmissionLimits
from kiban.cli import HELP_MARKUP, INTERRUPTED_EXIT, coercion, complete
from kiban.cli.admin import admin_app
from kiban.cli.audit import audit_command
from kiban.cli.bench import bench_app
from kiban.cli.budgets import budgets_app
from kiban.cli.dev import dev_app
from kiban.cli.failure import fail
from kiban.cli.health import health_app
from kiban.cli.health_sweep import DEFAULT_SWEEP_EVERY_S
from kiban.cli.manifest_files import read_text
from kiban.cli.node_agent import node_agent_command
from kiban.cli.notebook import notebook_app
from kiban.cli.output import Output, OutputOpt, print_document
from kiban.cli.policy import policy_app
from kiban.cli.serving import (
    chat_command,
    describe_service,
    promote_command,
    rollback_command,
    serve_command,
    services_command,
)
from kiban.cli.share import share_command
from kiban.cli.sim import sim_command
from kiban.cli.usage import usage_command
from kiban.domain.errors import SpecError
from kiban.sdk.errors import ApiError

if TYPE_CHECKING:
    from rich.console import RenderableType

    from kiban.sdk.client import Client

coercion.install()

app = typer.Typer(
    rich_markup_mode=HELP_MARKUP,
    name="kiban",
    help="kiban: a multi-tenant GPU platform. Start it with `kiban up`, then `kiban run` or "
    "`kiban submit` jobs from another terminal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
app.add_typer(admin_app, name="admin")
app.add_typer(bench_app, name="bench")
app.add_typer(dev_app, name="dev")
app.add_typer(health_app, name="health")
app.add_typer(notebook_app, name="notebook")
app.add_typer(policy_app, name="policy")
app.add_typer(budgets_app, name="budgets")
app.command("sim")(sim_command)
app.command("share")(share_command)
app.command("audit")(audit_command)
app.command("usage")(usage_command)
app.command("node-agent")(node_agent_command)
app.command("serve")(serve_command)
app.command("services")(services_command)
app.command("promote")(promote_command)
app.command("rollback")(rollback_command)
app.command("chat")(chat_command)

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


def print_json(data: Any) -> None:
    print_document(data, Output.JSON)


def client() -> Client:
    from kiban.sdk.client import Client

    return Client()


def show_version(value: bool) -> None:
    if value:
        from kiban import __version__

        sys.stdout.write(f"kiban {__version__}\n")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="print the version and exit", callback=show_version, is_eager=True
        ),
    ] = False,
) -> None:
    """kiban: a multi-tenant GPU platform."""


# -- the platform ------------------------------------------------------------------------------
@app.command()
def up(
    home: Annotated[Path | None, typer.Option(help="state directory (default ~/.kiban)")] = None,
    port: Annotated[int, typer.Option(help="port to listen on (0: any free port)")] = 8470,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    router_port: Annotated[
        int | None,
        typer.Option(help="port of inference services' router (default: --port + 1; 0: any)"),
    ] = None,
    nodes: Annotated[int | None, typer.Option(help="virtual nodes of the local executor")] = None,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs of each virtual node")] = 0,
    config: Annotated[Path | None, typer.Option(help="cluster file: nodes and policy")] = None,
    db: Annotated[str | None, typer.Option(help="store URL, e.g. postgresql+psycopg://...")] = None,
    backend: Annotated[
        str, typer.Option(help="executor: local (processes here) or kubernetes (pods)")
    ] = "local",
    kubeconfig: Annotated[
        Path | None, typer.Option(help="kubeconfig of the cluster (default: in-cluster)")
    ] = None,
    namespace_prefix: Annotated[
        str, typer.Option(help="Kubernetes: each tenant's namespace is this prefix + tenant")
    ] = "kiban-",
    image: Annotated[
        str | None, typer.Option(help="Kubernetes: image of tasks that name none")
    ] = None,
    unhealthy_condition: Annotated[
        list[str] | None,
        typer.Option(help="Kubernetes: node condition type that, True, makes a node unhealthy"),
    ] = None,
    pod_api_url: Annotated[
        str | None,
        typer.Option(
            help="Kubernetes: the URL at which pods reach this API (given to them as KIBAN_URL "
            "with a token of their job's own); none: they get neither"
        ),
    ] = None,
    max_requests_per_principal: Annotated[
        int,
        typer.Option(
            help="API requests one caller (member, admin or job) may have in flight; more "
            "wait briefly in line, then get 503",
            min=1,
        ),
    ] = AdmissionLimits.max_requests_per_principal,
    max_follows_per_principal: Annotated[
        int,
        typer.Option(help="logs one caller may follow at once; more get 503", min=1),
    ] = AdmissionLimits.max_follows_per_principal,
    multi_tenant: Annotated[
        bool,
        typer.Option(
            "--multi-tenant",
            help="several tenants share this machine: refuse to start unless root (local jobs "
            "then run as a user per tenant), and keep the admin token out of the home",
        ),
    ] = False,
    no_node_agent: Annotated[
        bool,
        typer.Option(
            "--no-node-agent", help="local: do not run the node agent (GPU health checks)"
        ),
    ] = False,
    agent_readings_dir: Annotated[
        Path | None,
        typer.Option(help="local: the node agent reads DIR/NODE.json instead of NVML"),
    ] = None,
    health_interval: Annotated[
        float, typer.Option(help="local: seconds between the node agent's checks", min=0.1)
    ] = 30.0,
    sweep_every: Annotated[
        float,
        typer.Option(
            help="seconds between allreduce sweeps of idle nodes (kiban health sweep); 0: none",
            min=0,
        ),
    ] = DEFAULT_SWEEP_EVERY_S,
    max_array_size: Annotated[
        int,
        typer.Option(help="the most indices one job array may have (spec.array)", min=1),
    ] = 10_000,  # kiban.domain.job_relations.DEFAULT_MAX_ARRAY_SIZE (pydantic: not imported here)
    notebook_ready_timeout: Annotated[
        float,
        typer.Option(
            help="seconds a starting notebook's JupyterLab has to answer before it is failed",
            min=1,
        ),
    ] = 120.0,  # kiban.domain.notebook.DEFAULT_READY_TIMEOUT_S
    no_audit: Annotated[
        bool,
        typer.Option(
            "--no-audit",
            help="keep no audit log of state-changing requests (only to measure what it costs: "
            "kiban bench submit)",
        ),
    ] = False,
) -> None:
    """Run the whole platform in the foreground: API, scheduler and an executor. One at a time
    per home, and per PostgreSQL database: a second is refused, naming the first."""
    from kiban.cli import render
    from kiban.domain.cluster import parse_cluster_config
    from kiban.domain.manifests import load_document
    from kiban.sdk.client import default_home

    if backend not in ("local", "kubernetes"):
        fail(f"--backend must be local or kubernetes, not {backend!r}")
    kube_options = None
    if backend == "kubernetes":
        if nodes is not None or gpus_per_node:
            fail("--nodes and --gpus-per-node are for the local backend; Kubernetes has nodes")
        from kiban.executors.kubernetes.options import KubernetesOptions

        defaults = KubernetesOptions()
        try:
            kube_options = KubernetesOptions(
                namespace_prefix=namespace_prefix,
                default_image=image,
                unhealthy_conditions=tuple(unhealthy_condition or defaults.unhealthy_conditions),
                pod_api_url=pod_api_url,
            )
        except ValueError as exc:
            fail(str(exc))
    elif kubeconfig is not None or image is not None or unhealthy_condition or pod_api_url:
        fail(
            "--kubeconfig, --image, --unhealthy-condition and --pod-api-url need "
            "--backend kubernetes"
        )
    if backend != "local" and agent_readings_dir is not None:
        fail("--agent-readings-dir is for the local backend (on Kubernetes a DaemonSet runs it)")
    if agent_readings_dir is not None and not agent_readings_dir.is_dir():
        fail(f"--agent-readings-dir {agent_readings_dir} is not a directory")
    if nodes is not None and nodes < 1:
        fail("--nodes must be at least 1")
    if gpus_per_node < 0:
        fail("--gpus-per-node must not be negative")
    if not 0 <= port <= 65535:
        fail("--port must be between 0 and 65535")
    if router_port is not None and not 0 <= router_port <= 65535:
        fail("--router-port must be between 0 and 65535")
    cluster = None
    if config is not None:
        try:
            document = load_document(config.read_text())
            cluster = parse_cluster_config(document)
        except OSError as exc:
            fail(f"cannot read {config}: {exc.strerror}")
        except SpecError as exc:
            fail(f"{config}: {exc}")
    home = (home or default_home()).expanduser().resolve()
    from kiban.control.ownership import Ownership, OwnershipError

    try:  # the home first: a second control plane there is refused before the server loads
        ownership = Ownership.claim_home(home)
    except OwnershipError as exc:
        fail(str(exc))
    from kiban.serving.router import native

    native.activate()  # the router's request path compiled, where a build exists
    try:
        from kiban.server import ServerOptions, serve
    except KeyboardInterrupt:  # Ctrl-C while the server's modules load: nothing started yet
        render.err.print("kiban up: interrupted while starting; stopped, nothing left running")
        raise typer.Exit(INTERRUPTED_EXIT) from None
    options = ServerOptions(
        home=home,
        host=host,
        port=port,
        router_port=router_port,
        db_url=db,
        config=cluster,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        backend=backend,
        kubeconfig=kubeconfig.expanduser().resolve() if kubeconfig is not None else None,
        kube_options=kube_options,
        limits=AdmissionLimits(
            max_requests_per_principal=max_requests_per_principal,
            max_follows_per_principal=max_follows_per_principal,
        ),
        multi_tenant=multi_tenant,
        node_agent=not no_node_agent,
        agent_readings_dir=agent_readings_dir.resolve() if agent_readings_dir else None,
        health_interval_s=health_interval,
        sweep_every_s=sweep_every or None,
        max_array_size=max_array_size,
        notebook_ready_timeout_s=notebook_ready_timeout,
        audit=not no_audit,
    )
    with contextlib.suppress(KeyboardInterrupt):
        serve(options, ownership)


@app.command(
    "model-server",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def model_server(ctx: typer.Context) -> None:
    """Run the model server alone, as kiban runs it for each replica of a service (its
    options, KServe's names included: ``kiban model-server --help``)."""
    from kiban.serving.runtime.__main__ import main as runtime_main

    raise typer.Exit(runtime_main(list(ctx.args)))


# -- submitting --------------------------------------------------------------------------------
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


@app.command()
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


@app.command(cls=RunCommand, context_settings={"allow_interspersed_args": False})
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


# -- looking -------------------------------------------------------------------------------------
@app.command("ls")
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


@app.command()
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


@app.command()
def delete(
    kind: Annotated[str, typer.Argument(help="service")],
    name: Annotated[str, typer.Argument(help="its name", autocompletion=complete.service_names)],
) -> None:
    """Delete an inference service: its replicas stop, then it is gone (``kiban cancel`` ends
    a job)."""
    from rich.markup import escape

    from kiban.cli import render

    if kind not in ("service", "svc"):
        fail(f"kiban delete takes `service NAME`, not {kind!r} (a job is ended by kiban cancel)")
    with client() as api:
        api.delete_service(name)
    render.err.print(escape(f"service {name} is being deleted; its replicas stop"))


@app.command()
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


@app.command()
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


@app.command()
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


@app.command()
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


@app.command()
def queues(output: OutputOpt = Output.TABLE) -> None:
    """Queues per flavor: nominal, used, borrowed, lent, pending; the tenant's usage, standing.
    ``-o wide`` adds the borrowing and lending limits and the fair-share weight."""
    from kiban.cli import render

    with client() as api:
        rows = api.queues()
    if output.structured:
        print_document(rows, output)
    else:
        render.out.print(render.queues_table(rows, wide=output is Output.WIDE))


@app.command()
def nodes(output: OutputOpt = Output.TABLE) -> None:
    """Nodes with their GPUs, use, health, who cordoned them, and their health checks'
    conditions that are not False (``GpuEcc``: failing; ``GpuXid?``: Unknown; ``ok``: none);
    ``-o wide`` adds free GPUs and the health message of healthy nodes too."""
    from kiban.cli import render

    with client() as api:
        rows = api.nodes()
    if output.structured:
        print_document(rows, output)
    else:
        render.out.print(render.nodes_table(rows, wide=output is Output.WIDE))


@app.command()
def cordon(node: Annotated[str, typer.Argument(help="node name")]) -> None:
    """Take a node out of scheduling (admin): no new work; running jobs keep running."""
    from rich.markup import escape

    from kiban.cli import render

    with client() as api:
        api.cordon(node)
    render.err.print(escape(f"node {node} cordoned"))


@app.command()
def uncordon(node: Annotated[str, typer.Argument(help="node name")]) -> None:
    """Let a cordoned node take new work again (admin)."""
    from rich.markup import escape

    from kiban.cli import render

    with client() as api:
        api.uncordon(node)
    render.err.print(escape(f"node {node} uncordoned"))


def auth_hint() -> str:
    """What to do about a refused token: where the CLI took it from."""
    from kiban.sdk.client import default_home, env_value

    if env_value("KIBAN_TOKEN"):
        return "the server refused the token in KIBAN_TOKEN (unset it to use the kiban home's)"
    token_file = default_home() / "token"
    return (
        f"set KIBAN_TOKEN, or KIBAN_HOME to the directory where `kiban up` wrote its token "
        f"(looked for {token_file})"
    )


def error_line(message: str) -> None:
    from rich.markup import escape

    from kiban.cli import render

    render.err.print(f"[red]error:[/red] {escape(message)}", highlight=False)


def command_name(info: Any) -> str:
    """The name a registered command or group is called by (Typer's rule for a function)."""
    return str(info.name or info.callback.__name__).lower().replace("_", "-")


def invoked_app(argv: list[str]) -> typer.Typer:
    """``app`` with only the command ``argv`` calls (and the root's options).

    Typer builds a Click command from the signature of every registered command on each call,
    which cost more than the rest of ``kiban --version``'s start-up (``kiban bench cli``); a
    call runs one (``kiban --version``: none). The whole app when the commands are listed
    (``kiban``, ``kiban --help``), for an unknown one (its error suggests the known), or when
    the shell asks for completions.
    """
    if os.environ.get("_KIBAN_COMPLETE"):
        return app
    word = next((a for a in argv if not a.startswith("-")), None)
    commands = [c for c in app.registered_commands if command_name(c) == word]
    groups = [g for g in app.registered_groups if command_name(g) == word]
    if word is None:
        if not argv or "--help" in argv:
            return app  # the list of commands
    elif not (commands or groups):
        return app
    trimmed = copy.copy(app)
    trimmed.registered_commands = commands
    trimmed.registered_groups = groups
    return trimmed


def skip_httpx_command_line() -> None:
    """Keep httpx from importing its own command line (click, Rich's progress bars and
    Pygments), which it does when those are installed and skips when it is missing
    (``httpx[cli]`` is optional): kiban's CLI never runs it, and not importing it takes about a
    third off the HTTP client's import. Done by the entry point, before httpx is imported."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def main() -> None:
    """Entry point: turn API and spec errors into one readable line and a non-zero exit, and
    Ctrl-C that no command caught (while its modules load, or an error line is written) into
    the shell's exit code for it, without a traceback."""
    try:
        _run(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED_EXIT)


def _run(args: list[str]) -> None:
    skip_httpx_command_line()
    try:
        invoked_app(args)(prog_name="kiban")
    except ApiError as exc:
        message = exc.message
        if exc.status == 401:
            message += f"; {auth_hint()}"
        error_line(message)
        sys.exit(1)
    except SpecError as exc:
        error_line(str(exc))
        sys.exit(1)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
