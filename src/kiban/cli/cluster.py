"""The cluster as a member or an admin sees it: ``queues`` and ``nodes``, and taking a node
out of scheduling and back (``cordon``, ``uncordon``)."""

from __future__ import annotations

from typing import Annotated

import typer

from kiban.cli.connection import client
from kiban.cli.output import Output, OutputOpt, print_document

cluster_commands = typer.Typer()
"""The cluster commands (the ``kiban`` app loads each from here when it is called)."""


@cluster_commands.command()
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


@cluster_commands.command()
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


@cluster_commands.command()
def cordon(node: Annotated[str, typer.Argument(help="node name")]) -> None:
    """Take a node out of scheduling (admin): no new work; running jobs keep running."""
    from rich.markup import escape

    from kiban.cli import render

    with client() as api:
        api.cordon(node)
    render.err.print(escape(f"node {node} cordoned"))


@cluster_commands.command()
def uncordon(node: Annotated[str, typer.Argument(help="node name")]) -> None:
    """Let a cordoned node take new work again (admin)."""
    from rich.markup import escape

    from kiban.cli import render

    with client() as api:
        api.uncordon(node)
    render.err.print(escape(f"node {node} uncordoned"))
