"""``kiban share``: fair share per member within each tenant, as Slurm's ``sshare`` shows it.

Members of a tenant are ordered by their standing (decayed usage per weight), lowest first:
the order in which the scheduler takes their jobs within the tenant's queues. ``kiban queues``
shows the first level, the tenants' usage and standing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from kiban.cli.output import Output, OutputOpt, print_document

if TYPE_CHECKING:
    from rich.table import Table

SHARE_COLUMNS = (
    "TENANT",
    "MEMBER",
    "WEIGHT",
    "SHARE",
    "RAW GPU-H",
    "DECAYED GPU-H",
    "EFFECTIVE",
    "STANDING",
    "RANK",
)


def share_command(
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="only this tenant's members")
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Each member's fair share within its tenant: weight and its part of the tenant's weights,
    raw and decayed usage (weighted GPU-hours), part of the tenant's decayed usage, standing
    (decayed usage per weight, in hours; lower goes first within the tenant) and rank."""
    from kiban.cli import render
    from kiban.sdk.client import Client

    with Client() as api:
        rows = api.share(tenant)
    if output.structured:
        print_document(rows, output)
    else:
        render.out.print(share_table(rows))


def share_table(rows: list[dict[str, Any]]) -> Table:
    """One row per member; a member without a name (jobs submitted by none) shows as ``-``."""
    from rich.table import Table

    from kiban.cli.render import cells, gpu_hours

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in SHARE_COLUMNS:
        table.add_column(column)
    for r in rows:
        table.add_row(
            *cells(
                r["tenant"],
                r["member"] or "-",
                f"{r['weight']:g}",
                f"{r['share']:.3f}",
                gpu_hours(r["rawUsage"]),
                gpu_hours(r["usage"]),
                f"{r['effective']:.3f}",
                gpu_hours(r["standing"]),
                str(r["rank"]),
            )
        )
    return table
