"""``kiban audit``: who changed what, when, from where, and how it ended (admin); ``--verify``
walks the log's hash chain and names the first record where it breaks."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from kiban.cli import render
from kiban.cli.failure import fail
from kiban.cli.output import Output, OutputOpt, print_document

VERIFY_BROKEN_EXIT = 3
"""``kiban audit --verify``'s exit status when the chain is broken (1 is any other error)."""


def since_seconds(text: str, now: datetime | None = None) -> float:
    """``--since`` (a duration such as ``30m``, ``2h``, ``7d``, or a time such as
    ``2026-11-01T09:00``) as UNIX seconds."""
    from kiban.cli.logs import parse_since

    moment = parse_since(text, now)
    if isinstance(moment, datetime):
        return moment.timestamp()
    return (now or datetime.now()).timestamp() - moment.total_seconds()


def audit_command(
    since: Annotated[
        str | None,
        typer.Option(help="from this long ago (30m, 2h, 7d) or this time (2026-11-01T09:00)"),
    ] = None,
    principal: Annotated[
        str | None, typer.Option(help="only this member's requests (a token's member name)")
    ] = None,
    action: Annotated[
        str | None, typer.Option(help="only this action, e.g. jobs.submit, policy.apply")
    ] = None,
    limit: Annotated[int, typer.Option(help="at most this many records", min=1)] = 100,
    verify: Annotated[
        bool,
        typer.Option("--verify", help="walk the hash chain; name the first broken record"),
    ] = False,
    output: OutputOpt = Output.TABLE,
) -> None:
    """The audit log, newest first (admin): every request that changed state or tried to,
    denials included. ``--verify`` checks that no record was changed or removed."""
    from kiban.domain.audit import AuditAction
    from kiban.sdk.client import Client

    if verify:
        with Client() as api:
            verdict = api.verify_audit()
        if output.structured:
            print_document(verdict, output)
        elif verdict["intact"]:
            render.out.print(render.escape(verdict["message"]))
        else:
            render.err.print(
                render.escape(
                    f"audit log broken at record {verdict['breakSeq']}: {verdict['message']}"
                )
            )
        if not verdict["intact"]:
            raise typer.Exit(VERIFY_BROKEN_EXIT)
        return
    if action is not None and action not in {a.value for a in AuditAction}:
        known = ", ".join(a.value for a in AuditAction)
        fail(f"--action {action!r} is not an action; one of: {known}")
    after = None
    if since is not None:
        try:
            after = since_seconds(since)
        except ValueError as exc:
            fail(f"--since: {exc}")
    with Client() as api:
        rows = api.audit(since=after, member=principal, action=action, limit=limit)
    if output.structured:
        print_document(rows, output)
    else:
        render.out.print(audit_table(rows, wide=output is Output.WIDE))


def audit_table(rows: list[dict[str, Any]], wide: bool = False) -> Any:
    """One row per record; ``wide`` adds the method, path, source address and hash."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    columns = ["SEQ", "TIME", "MEMBER", "ROLE", "TENANT", "ACTION", "TARGET", "OUTCOME"]
    if wide:
        columns += ["STATUS", "METHOD", "PATH", "SOURCE", "HASH"]
    for column in columns:
        table.add_column(column)
    for r in rows:
        row: list[object] = [
            r["seq"],
            render.date_time(r["at"]),
            r["member"] or "-",
            r["role"] or "-",
            r["tenant"] or "-",
            r["action"],
            r["target"] or "-",
            r["outcome"],
        ]
        if wide:
            row += [r["status"] or "-", r["method"], r["path"], r["source"] or "-", r["hash"][:12]]
        table.add_row(*render.cells(*row))
    return table
