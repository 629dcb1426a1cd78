"""``kiban``: run the platform, submit and watch jobs, look at queues and nodes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape

from kiban.api.limits import AdmissionLimits
from kiban.cli import render
from kiban.cli.admin import admin_app
from kiban.cli.bench import bench_app
from kiban.cli.dev import dev_app
from kiban.cli.policy import policy_app
from kiban.cli.serving import (
    chat_command,
    describe_service,
    promote_command,
    rollback_command,
    serve_command,
    services_command,
)
from kiban.cli.sim import sim_command
from kiban.domain.errors import SpecError
from kiban.domain.manifests import load_document
from kiban.sdk.client import ApiError, Client, default_home

app = typer.Typer(
    rich_markup_mode=render.HELP_MARKUP,
    name="kiban",
    help="kiban: a multi-tenant GPU platform. Start it with `kiban up`, then `kiban run` or "
    "`kiban submit` jobs from another terminal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(admin_app, name="admin")
app.add_typer(bench_app, name="bench")
app.add_typer(dev_app, name="dev")
app.add_typer(policy_app, name="policy")
app.command("sim")(sim_command)
app.command("serve")(serve_command)
app.command("services")(services_command)
app.command("promote")(promote_command)
app.command("rollback")(rollback_command)
app.command("chat")(chat_command)

OutputOpt = Annotated[str, typer.Option("--output", "-o", help="table or json")]
TERMINAL = {"Succeeded", "Failed", "Cancelled"}


def fail(message: str, code: int = 1) -> NoReturn:
    render.err.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False)
    raise typer.Exit(code)


def check_output(output: str) -> None:
    if output not in ("table", "json"):
        fail(f"--output must be table or json, not {output!r}")


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def client() -> Client:
    return Client()


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
) -> None:
    """Run the whole platform in the foreground: API, scheduler and an executor. One at a time
    per home, and per PostgreSQL database: a second is refused, naming the first."""
    from kiban.domain.cluster import parse_cluster_config

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
    try:
        from kiban.server import ServerOptions, serve
    except KeyboardInterrupt:  # Ctrl-C while the server's modules load: nothing started yet
        render.err.print("kiban up: interrupted while starting; stopped, nothing left running")
        raise typer.Exit(130) from None
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
def read_manifest(file: str) -> dict[str, Any]:
    if file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(file).read_text()
        except OSError as exc:
            fail(f"cannot read {file}: {exc.strerror}")
    document = load_document(text)
    spec = document.get("spec")
    if (
        document.get("kind") == "Job"
        and document.get("apiVersion") == "kiban/v1"
        and isinstance(spec, dict)
    ):
        spec.setdefault("workingDir", os.getcwd())
    return document


@app.command()
def submit(
    file: Annotated[str, typer.Argument(help="job manifest (YAML or JSON); - for stdin")],
) -> None:
    """Submit a job manifest; prints the job id alone on stdout."""
    document = read_manifest(file)
    with client() as api:
        job = api.submit(document)
    print(job["id"])
    render.err.print(f"job {job['id']} submitted to queue {job['queue']}")
    for warning in job.get("warnings") or []:
        render.err.print(f"warning: {warning}", markup=False, highlight=False)


def job_name_for(command: list[str]) -> str:
    base = Path(command[0]).name.lower() if command else "run"
    if base.startswith("python") and len(command) > 1:
        base = Path(command[1]).stem.lower()
    name = re.sub(r"[^a-z0-9-]+", "-", base).strip("-")[:40]
    return name or "run"


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    command: Annotated[list[str], typer.Argument(help="the command, after --")],
    name: Annotated[str | None, typer.Option(help="job name")] = None,
    queue: Annotated[str, typer.Option(help="queue to submit to")] = "default",
    nodes: Annotated[int, typer.Option(help="replicas (one per node)")] = 1,
    gpus_per_node: Annotated[
        int, typer.Option("--gpus-per-node", "--gpus", help="GPUs per replica")
    ] = 0,
    cpus: Annotated[float, typer.Option(help="CPUs per replica")] = 1.0,
    memory: Annotated[str, typer.Option(help="memory per replica, e.g. 4Gi")] = "1Gi",
    priority: Annotated[str | None, typer.Option(help="priority class")] = None,
    launcher: Annotated[str, typer.Option(help="torchrun or none")] = "none",
    max_runtime: Annotated[str | None, typer.Option(help="e.g. 2h")] = None,
) -> None:
    """Run a command as a job: ``kiban run --nodes 2 --gpus-per-node 4 -- torchrun train.py``."""
    spec: dict[str, Any] = {
        "queue": queue,
        "launcher": launcher,
        "workingDir": os.getcwd(),
        "tasks": [
            {
                "name": "worker",
                "replicas": nodes,
                "resources": {"gpu": gpus_per_node, "cpu": cpus, "memory": memory},
                "command": command,
            }
        ],
    }
    if priority:
        spec["priorityClass"] = priority
    if max_runtime:
        spec["maxRuntime"] = max_runtime
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": name or job_name_for(command)},
        "spec": spec,
    }
    with client() as api:
        job = api.submit(document)
    print(job["id"])
    render.err.print(f"job {job['id']} submitted to queue {job['queue']}")


# -- looking -------------------------------------------------------------------------------------
@app.command("ls")
def list_jobs(
    output: OutputOpt = "table",
    state: Annotated[list[str] | None, typer.Option(help="filter by state (repeatable)")] = None,
    queue: Annotated[str | None, typer.Option(help="filter by queue")] = None,
    limit: Annotated[int, typer.Option(help="at most this many")] = 100,
) -> None:
    """List jobs, newest first; a waiting job's reason and forecast start (ETA)."""
    check_output(output)
    with client() as api:
        jobs = api.jobs(state=state, queue=queue, limit=limit)
    if output == "json":
        print_json(jobs)
    else:
        render.out.print(render.jobs_table(jobs))


@app.command()
def describe(
    target: Annotated[str, typer.Argument(help="a job id, or `service`")],
    name: Annotated[str | None, typer.Argument(help="the service's name")] = None,
    output: OutputOpt = "table",
) -> None:
    """A job's spec, state, placement, pending reason, positions, forecast start, its tenant's
    standing, preemptor, last checkpoint and events; or, as ``describe service NAME``, a
    service's revisions, replicas, traffic split, latency and URL."""
    check_output(output)
    if target in ("service", "svc"):
        if name is None:
            fail("name the service: kiban describe service NAME")
        with client() as api:
            service = api.service(name)
            service_events = api.service_events(name)
        if output == "json":
            print_json({**service, "events": service_events})
        else:
            describe_service(service, service_events)
        return
    if name is not None:
        if target != "job":
            fail(f"describe takes a job id, `job ID` or `service NAME`, not {target!r}")
        target = name
    with client() as api:
        job = api.job(target)
        events = api.events(target)
    if output == "json":
        print_json({**job, "events": events})
    else:
        render.describe_job(job, events)


@app.command()
def delete(
    kind: Annotated[str, typer.Argument(help="service")],
    name: Annotated[str, typer.Argument(help="its name")],
) -> None:
    """Delete an inference service: its replicas stop, then it is gone (``kiban cancel`` ends
    a job)."""
    if kind not in ("service", "svc"):
        fail(f"kiban delete takes `service NAME`, not {kind!r} (a job is ended by kiban cancel)")
    with client() as api:
        api.delete_service(name)
    render.err.print(escape(f"service {name} is being deleted; its replicas stop"))


@app.command()
def logs(
    job_id: Annotated[str, typer.Argument(help="job id")],
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
    job_id: Annotated[str, typer.Argument(help="job id")],
    timeout: Annotated[float | None, typer.Option(help="give up after this many seconds")] = None,
) -> None:
    """Wait for a job to finish; exit 0 only if it succeeded."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with client() as api, render.err.status(f"waiting for {escape(job_id)}") as status:
        while True:
            job = api.job(job_id)
            state = job["state"]
            detail = ""
            if job.get("reason"):
                detail = f": {job['reason']['code']}"
            status.update(
                escape(
                    f"{job_id}: {state}{detail} ({render.duration(job)} running)"
                    if job.get("startedAt")
                    else f"{job_id}: {state}{detail}"
                )
            )
            if state in TERMINAL:
                break
            if deadline is not None and time.monotonic() > deadline:
                fail(f"timed out after {timeout:g}s; job {job_id} is {state}", code=2)
            time.sleep(0.25)
    message = f" ({job['message']})" if job.get("message") else ""
    render.err.print(escape(f"job {job_id} {state}{message}"))
    if state != "Succeeded":
        raise typer.Exit(1)


@app.command()
def cancel(job_id: Annotated[str, typer.Argument(help="job id")]) -> None:
    """Cancel a job (running replicas get SIGTERM, then SIGKILL after the grace period)."""
    with client() as api:
        job = api.cancel(job_id)
    render.err.print(escape(f"job {job_id}: {job['state']}"))


@app.command()
def checkpoint(
    job_id: Annotated[
        str | None, typer.Argument(help="job id (default: $KIBAN_JOB_ID, inside a job)")
    ] = None,
) -> None:
    """Report that a running job saved a checkpoint now (preemption prefers jobs that lose less)."""
    job_id = job_id or os.environ.get("KIBAN_JOB_ID")
    if not job_id:
        fail("which job? give its id, or run this inside a job (KIBAN_JOB_ID is not set)")
    with client() as api:
        job = api.checkpoint(job_id)
    render.err.print(
        escape(f"job {job_id}: checkpoint recorded at {render.when(job['lastCheckpointAt'])}")
    )


@app.command()
def queues(output: OutputOpt = "table") -> None:
    """Queues per flavor: nominal, used, borrowed, lent, pending; the tenant's usage, standing."""
    check_output(output)
    with client() as api:
        rows = api.queues()
    if output == "json":
        print_json(rows)
    else:
        render.out.print(render.queues_table(rows))


@app.command()
def nodes(output: OutputOpt = "table") -> None:
    """Nodes with their GPUs, use and health."""
    check_output(output)
    with client() as api:
        rows = api.nodes()
    if output == "json":
        print_json(rows)
    else:
        render.out.print(render.nodes_table(rows))


@app.command()
def cordon(node: Annotated[str, typer.Argument(help="node name")]) -> None:
    """Take a node out of scheduling (admin): no new work; running jobs keep running."""
    with client() as api:
        api.cordon(node)
    render.err.print(escape(f"node {node} cordoned"))


@app.command()
def uncordon(node: Annotated[str, typer.Argument(help="node name")]) -> None:
    """Let a cordoned node take new work again (admin)."""
    with client() as api:
        api.uncordon(node)
    render.err.print(escape(f"node {node} uncordoned"))


def auth_hint() -> str:
    """What to do about a refused token: where the CLI took it from."""
    if os.environ.get("KIBAN_TOKEN"):
        return "the server refused the token in KIBAN_TOKEN (unset it to use the kiban home's)"
    token_file = default_home() / "token"
    return (
        f"set KIBAN_TOKEN, or KIBAN_HOME to the directory where `kiban up` wrote its token "
        f"(looked for {token_file})"
    )


def main() -> None:
    """Entry point: turn API and spec errors into one readable line and a non-zero exit."""
    try:
        app()
    except ApiError as exc:
        message = exc.message
        if exc.status == 401:
            message += f"; {auth_hint()}"
        render.err.print(f"[red]error:[/red] {escape(message)}", highlight=False)
        sys.exit(1)
    except SpecError as exc:
        render.err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        sys.exit(1)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
