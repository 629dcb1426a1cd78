"""``kiban dev``: tools for developing and trying kiban, starting with a local Kubernetes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from kiban.cli import render

dev_app = typer.Typer(
    rich_markup_mode=render.HELP_MARKUP,
    help="Developer tools: a local Kubernetes control plane with fake GPU nodes.",
    no_args_is_help=True,
)
kube_app = typer.Typer(
    rich_markup_mode=render.HELP_MARKUP,
    help="A local Kubernetes control plane (etcd, kube-apiserver, KWOK) on loopback.",
    no_args_is_help=True,
)
dev_app.add_typer(kube_app, name="kube")

DirOpt = Annotated[
    Path, typer.Option("--dir", help="directory for the kubeconfig, certificates, data and logs")
]


def _fail(message: str) -> NoReturn:
    render.err.print(f"[red]error:[/red] {render.escape(message)}", markup=True, highlight=False)
    raise typer.Exit(1)


@kube_app.command("up")
def up(
    directory: DirOpt,
    nodes: Annotated[int, typer.Option(help="fake nodes to create")] = 4,
    gpus_per_node: Annotated[int, typer.Option(help="nvidia.com/gpu of each node")] = 8,
    gpu_product: Annotated[
        str, typer.Option(help="value of each node's nvidia.com/gpu.product label")
    ] = "H100",
    label: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE label of every node (repeatable)")
    ] = None,
    topology: Annotated[
        str | None,
        typer.Option(
            help="ISLANDSxBLOCKSxLOCAL_BLOCKS, e.g. 2x4x4: the nodes fill the local blocks in "
            "order and carry OCI's RDMA topology labels"
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for each part to start")] = 120,
) -> None:
    """Start etcd, kube-apiserver and KWOK in the background and create fake GPU nodes.

    Returns once the API is healthy and the nodes are Ready; DIR/kubeconfig is the admin's.
    Stop everything with `kiban dev kube down --dir DIR`.
    """
    from kiban.devtools.kube import (
        ControlPlaneError,
        ControlPlaneOptions,
        FakeNodeSpec,
        KubeBinariesMissing,
        NodeSpecError,
        start_control_plane,
    )
    from kiban.devtools.kube.fakenodes import parse_labels, parse_topology

    if timeout <= 0:
        _fail("--timeout must be positive")
    try:
        spec = FakeNodeSpec(
            count=nodes,
            gpus=gpus_per_node,
            gpu_product=gpu_product,
            labels=parse_labels(label or []),
            topology=parse_topology(topology) if topology is not None else None,
        )
    except NodeSpecError as exc:
        _fail(str(exc))
    render.err.print(f"starting a control plane in {directory} ...")
    try:
        plane = start_control_plane(
            directory, ControlPlaneOptions(nodes=spec, start_timeout=timeout)
        )
    except KubeBinariesMissing as exc:
        _fail(str(exc))
    except ControlPlaneError as exc:
        _fail(f"--dir {directory}: {exc}")
    except OSError as exc:
        _fail(f"cannot use --dir {directory}: {exc}")
    render.err.print(
        f"API server {plane.server} with {len(plane.node_names)} fake node(s) "
        f"of {gpus_per_node} GPU(s)"
    )
    render.err.print(f"stop it with: kiban dev kube down --dir {directory}")
    print(f"export KUBECONFIG={plane.kubeconfig}")


@kube_app.command("down")
def down(directory: DirOpt) -> None:
    """Stop the control plane started in DIR (its logs and data stay there)."""
    from kiban.devtools.kube import stop_control_plane

    if not directory.is_dir():
        _fail(f"--dir {directory} is not a directory")
    stopped = stop_control_plane(directory.expanduser().resolve())
    if stopped:
        render.err.print(f"stopped {', '.join(stopped)}")
    else:
        render.err.print(f"nothing was running in {directory}")


@kube_app.command("status")
def status(directory: DirOpt) -> None:
    """Say which processes of the control plane in DIR are running."""
    from kiban.devtools.kube import running_processes

    if not directory.is_dir():
        _fail(f"--dir {directory} is not a directory")
    records = running_processes(directory.expanduser().resolve())
    if not records:
        render.err.print(f"nothing is running in {directory}")
        raise typer.Exit(3)
    for record in records:
        print(f"{record.name}\tpid {record.pid}\tlog {record.log}")
