"""``kiban audit``: who changed what, when, from where, and how it ended (admin); ``kiban audit
verify`` walks the log's hash chain and names the first record where it breaks, and ``kiban
audit anchor`` prints the chain's last record to keep outside the store (``verify --anchor``
then shows records cut off the end, even where the chain head was rewritten)."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from enum import StrEnum
from pathlib import Path
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


class AuditView(StrEnum):
    """What ``kiban audit`` shows: the records, the chain's verdict, or its anchor."""

    LIST = "list"
    VERIFY = "verify"
    ANCHOR = "anchor"


def anchor_text(given: str) -> str:
    """``--anchor``: ``SEQ:HASH``, or a file holding it (as ``kiban audit anchor`` prints it,
    or its ``-o json`` document), as ``SEQ:HASH``; ValueError saying what is wrong."""
    from kiban.domain.audit import parse_anchor

    text = given
    path = Path(given)
    if ":" not in given or path.is_file():
        try:
            text = path.read_text().strip()
        except OSError as exc:
            raise ValueError(f"{given!r} is neither SEQ:HASH nor a readable file ({exc})") from None
        if text.startswith("{"):
            try:
                document = json.loads(text)
                text = f"{int(document['seq'])}:{document['hash']}"
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{given} is not a JSON anchor (with seq and hash)") from None
    return str(parse_anchor(text))


def audit_command(
    view: Annotated[
        AuditView,
        typer.Argument(
            help="list (the records), verify (walk the chain), anchor (print its last record "
            "to keep elsewhere)",
            case_sensitive=False,
        ),
    ] = AuditView.LIST,
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
    anchor: Annotated[
        str | None,
        typer.Option(
            help="with verify: SEQ:HASH (or a file of it) from `kiban audit anchor`; the chain "
            "must still reach that record with that hash"
        ),
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """The audit log, newest first (admin): every request that changed state or tried to,
    denials included. ``verify`` (or ``--verify``) checks that no record was changed or
    removed; ``anchor`` prints the last record's SEQ:HASH to keep outside the store, and
    ``verify --anchor`` then also shows records removed from the end."""
    from kiban.domain.audit import AuditAction
    from kiban.sdk.client import Client

    if verify:
        view = AuditView.VERIFY
    if anchor is not None and view is not AuditView.VERIFY:
        fail("--anchor goes with verify: kiban audit verify --anchor SEQ:HASH")
    if view is AuditView.ANCHOR:
        with Client() as api:
            head = api.audit_anchor()
        if output.structured:
            print_document(head, output)
        else:
            sys.stdout.write(f"{head['anchor']}\n")  # alone: kiban audit anchor > FILE
        return
    if view is AuditView.VERIFY:
        kept = None
        if anchor is not None:
            try:
                kept = anchor_text(anchor)
            except ValueError as exc:
                fail(f"--anchor: {exc}")
        with Client() as api:
            verdict = api.verify_audit(kept)
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
