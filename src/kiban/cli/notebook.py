"""``kiban notebook start|ls|stop``: JupyterLab as an interactive job, behind kiban's route.
The SDK and Rich are imported by the commands, so registering these costs start-up nothing."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from kiban.cli.output import Output, OutputOpt, print_document

DEFAULT_NAME = "notebook"  # as kiban.domain.notebook (not imported: start-up stays light)

notebook_app = typer.Typer(
    help="Notebooks: JupyterLab on the cluster at KIBAN_URL/nb/TENANT/NAME/, stopped "
    "when idle (its directory kept; start it again to come back).",
    no_args_is_help=True,
)


def _idle(notebook: dict[str, Any], now: float) -> str:
    """How long a running notebook has been idle (``-`` otherwise)."""
    last = notebook.get("lastActivity")
    if notebook["state"] != "Running" or last is None:
        return "-"
    return f"{max(0.0, now - last):.0f}s"


@notebook_app.command("start")
def start_command(
    name: Annotated[str, typer.Argument(help="the notebook's name")] = DEFAULT_NAME,
    gpus: Annotated[int | None, typer.Option(help="GPUs it holds while it runs")] = None,
    queue: Annotated[str | None, typer.Option(help="the queue its job waits in")] = None,
    cpus: Annotated[str | None, typer.Option(help="CPUs (2, 500m)")] = None,
    idle_timeout: Annotated[
        str | None, typer.Option(help="stop it after this long idle (30m, 1h)")
    ] = None,
    max_lifetime: Annotated[
        str | None, typer.Option(help="stop it after this long, idle or not (24h)")
    ] = None,
) -> None:
    """Start a notebook, or start a stopped one again with its files; prints its URL."""
    from kiban.sdk.client import Client

    with Client() as api:
        found = api.start_notebook(
            name,
            gpus=gpus,
            queue=queue,
            cpus=cpus,
            idleTimeout=idle_timeout,
            maxLifetime=max_lifetime,
        )
        url = f"{api.url}{found['url']}"
    typer.echo(f"notebook {found['name']}: {found['state']} (job {found['jobId']})")
    typer.echo(url)


@notebook_app.command("ls")
def ls_command(output: OutputOpt = Output.TABLE) -> None:
    """List your notebooks: name, state, URL, GPUs, how long idle."""
    from rich.table import Table

    from kiban.cli import render
    from kiban.sdk.client import Client

    with Client() as api:
        found = api.notebooks()
        base = api.url
    if output.structured:
        print_document(found, output)
        return
    now = time.time()
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "STATE", "URL", "GPUS", "IDLE", "REASON"):
        table.add_column(column)
    for n in found:
        table.add_row(
            n["name"],
            n["state"],
            f"{base}{n['url']}",
            str(n["gpus"]),
            _idle(n, now),
            n.get("reason") or "",
        )
    render.out.print(table)


@notebook_app.command("stop")
def stop_command(name: Annotated[str, typer.Argument(help="the notebook's name")]) -> None:
    """Stop a notebook: its GPUs are released, its directory kept."""
    from kiban.sdk.client import Client

    with Client() as api:
        found = api.stop_notebook(name)
    typer.echo(f"notebook {found['name']}: {found['state']}")
