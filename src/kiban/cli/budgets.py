"""``kiban budgets``: how each budget stands, extensions granted, and granting one (admins)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from kiban.cli import render
from kiban.cli.output import Output, OutputOpt, print_document

budgets_app = typer.Typer(
    rich_markup_mode=render.HELP_MARKUP,
    help="Budgets: GPU-hours or cost per tenant and period, and extensions (admins grant them).",
    invoke_without_command=True,
)


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(at)) + "Z"


def _amount(unit: str, value: float) -> str:
    return f"{value:,.1f} GPU-h" if unit == "gpuHours" else f"{value:,.2f}"


def budget_rows(found: list[dict[str, Any]]) -> list[list[str]]:
    """The table's rows: budget, used, limit, used part, period end, state, action."""
    return [
        render.cells(
            b["budget"],
            _amount(b["unit"], b["used"]),
            _amount(b["unit"], b["limit"])
            + (f" (+{_amount(b['unit'], b['extended'])})" if b["extended"] else ""),
            f"{b['ratio']:.0%}",
            f"{_utc(b['periodStart'])} .. {_utc(b['periodEnd'])}",
            b["state"],
            b["action"],
        )
        for b in found
    ]


@budgets_app.callback()
def budgets(ctx: typer.Context, output: OutputOpt = Output.TABLE) -> None:
    """Budgets whose period holds now: used, limit, period, state (your tenant's; all for an
    admin)."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from kiban.sdk.client import Client

    with Client() as api:
        found = api.budgets()
    if output.structured:
        print_document(found, output)
        return
    if not found:
        render.err.print("no budget holds now")
        return
    table = Table(box=None, header_style="bold")
    for column in ("BUDGET", "USED", "LIMIT", "USED %", "PERIOD (UTC)", "STATE", "ACTION"):
        table.add_column(column)
    for row in budget_rows(found):
        table.add_row(*row)
    render.out.print(table)


@budgets_app.command("extend")
def extend(
    tenant: Annotated[str, typer.Argument(help="the tenant whose budget to extend")],
    gpu_hours: Annotated[
        float | None, typer.Option("--gpu-hours", help="GPU-hours more (a budget in GPU-hours)")
    ] = None,
    cost: Annotated[float | None, typer.Option(help="cost more (a budget in cost)")] = None,
    queue: Annotated[str | None, typer.Option(help="the queue's budget, not the tenant's")] = None,
    until: Annotated[
        str | None,
        typer.Option(help="until a date or date-time, UTC (default: the period's end)"),
    ] = None,
    note: Annotated[str | None, typer.Option(help="why, kept with the record")] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Grant a budget more until a time (admin); recorded with who and when. Jobs it held start
    at the next pass."""
    from kiban.sdk.client import Client

    with Client() as api:
        granted = api.extend_budget(
            tenant, queue=queue, gpuHours=gpu_hours, cost=cost, until=until, note=note
        )
    if output.structured:
        print_document(granted, output)
        return
    render.say(
        f"budget {granted['budget']} extended by {_amount(granted['unit'], granted['amount'])} "
        f"until {_utc(granted['until'])} (extension {granted['id']}, by {granted['grantedBy']})"
    )


@budgets_app.command("extensions")
def extensions(output: OutputOpt = Output.TABLE) -> None:
    """Extensions granted, newest first: who granted what, when, until when."""
    from rich.table import Table

    from kiban.sdk.client import Client

    with Client() as api:
        found = api.budget_extensions()
    if output.structured:
        print_document(found, output)
        return
    table = Table(box=None, header_style="bold")
    for column in ("ID", "BUDGET", "AMOUNT", "GRANTED (UTC)", "BY", "UNTIL (UTC)", "NOTE"):
        table.add_column(column)
    for e in found:
        table.add_row(
            *render.cells(
                e["id"],
                e["budget"],
                _amount(e["unit"], e["amount"]),
                _utc(e["grantedAt"]),
                e["grantedBy"],
                _utc(e["until"]),
                e["note"] or "",
            )
        )
    render.out.print(table)
