"""``kiban up``, the whole platform in the foreground, and ``kiban model-server``, the model
server of one service replica run alone."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from kiban.api.limits import AdmissionLimits
from kiban.cli import INTERRUPTED_EXIT
from kiban.cli.failure import fail
from kiban.cli.health_sweep import DEFAULT_SWEEP_EVERY_S
from kiban.domain.errors import SpecError

up_commands = typer.Typer()
"""``up`` and ``model-server`` (the ``kiban`` app loads them from here when called)."""


@up_commands.command()
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
    notebook_storage: Annotated[
        str,
        typer.Option(help="Kubernetes: the size of the volume claim of each notebook's directory"),
    ] = "10Gi",
    notebook_storage_class: Annotated[
        str | None,
        typer.Option(help="Kubernetes: the StorageClass of notebooks' claims (none: the default)"),
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
    api_any_cpu: Annotated[
        bool,
        typer.Option(
            "--api-any-cpu",
            help="let the API's event loop and its writers run on any CPU (by default they "
            "share the one the loop starts on, which makes each request cheaper; choose this "
            "when local jobs keep every CPU busy)",
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
                notebook_storage=notebook_storage,
                notebook_storage_class=notebook_storage_class,
            )
        except ValueError as exc:
            fail(str(exc))
    elif (
        kubeconfig is not None
        or image is not None
        or unhealthy_condition
        or pod_api_url
        or notebook_storage != "10Gi"
        or notebook_storage_class is not None
    ):
        fail(
            "--kubeconfig, --image, --unhealthy-condition, --pod-api-url, --notebook-storage "
            "and --notebook-storage-class need --backend kubernetes"
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
        one_cpu=not api_any_cpu,
    )
    with contextlib.suppress(KeyboardInterrupt):
        serve(options, ownership)


@up_commands.command(
    "model-server",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def model_server(ctx: typer.Context) -> None:
    """Run the model server alone, as kiban runs it for each replica of a service (its
    options, KServe's names included: ``kiban model-server --help``)."""
    from kiban.serving.runtime.__main__ import main as runtime_main

    raise typer.Exit(runtime_main(list(ctx.args)))
