"""``kiban health``: run the GPU health checks of nodes now, through their agents.

``kiban health check NODE`` prints each check's condition; without NODE it checks every node
that has an agent, one after another, and prints a summary. It exits 1 when a check fails (a
problem present that is more than a warning), or a node could not be checked, so that
scripts can use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kiban.cli import render
from kiban.cli.failure import fail
from kiban.cli.output import Output, OutputOpt, print_document

if TYPE_CHECKING:
    from rich.table import Table

    from kiban.sdk.client import Client

health_app = typer.Typer(
    rich_markup_mode=render.HELP_MARKUP,
    help="Node health: run the GPU checks now.",
    no_args_is_help=True,
)
# `kiban health sweep` (the allreduce sweep, kiban/cli/health_sweep.py) joins this group at
# the merge: health_app.command("sweep")(sweep_command).

NO_AGENT = 409
"""``POST /nodes/NAME/health/check``'s answer for a node no agent has reported for."""


class Verdict(StrEnum):
    """What a node's check came to: a failing check, only warnings or Unknowns, all well,
    no agent to ask, or the check could not be run."""

    FAILING = "failing"
    UNKNOWN = "unknown"
    WARNING = "warning"
    OK = "ok"
    NO_AGENT = "no agent"
    ERROR = "error"

    @property
    def fails(self) -> bool:
        """Whether this verdict makes ``kiban health check`` exit 1."""
        return self in (Verdict.FAILING, Verdict.ERROR)


@dataclass(frozen=True)
class NodeCheck:
    """One node's check: the API's answer (None when there is none) and its verdict."""

    node: str
    verdict: Verdict
    answer: dict[str, Any] | None = None
    error: str = ""

    def as_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {"node": self.node, "verdict": self.verdict.value}
        if self.answer is not None:
            document.update(taken_at=self.answer["taken_at"], conditions=self.answer["conditions"])
        if self.error:
            document["error"] = self.error
        return document


def verdict_of(conditions: list[dict[str, Any]]) -> Verdict:
    """Failing when a condition is True and not a warning; else unknown when one is
    Unknown, warning when one is a True warning; else ok."""
    from kiban.health.conditions import WARNING_ONLY

    statuses = [(c["status"], c["type"] in WARNING_ONLY) for c in conditions]
    if ("True", False) in statuses:
        return Verdict.FAILING
    if any(status == "Unknown" for status, _ in statuses):
        return Verdict.UNKNOWN
    if ("True", True) in statuses:
        return Verdict.WARNING
    return Verdict.OK


REFUSED = (0, 401, 403)
"""Errors of the caller, not of a node (no server, a bad token, a member's token): the whole
command ends with the first."""


def check_one(api: Client, node: str) -> NodeCheck:
    """Check ``node`` now; an API error about the node is its verdict, not an exception."""
    from kiban.sdk.errors import ApiError

    try:
        answer = api.check_node(node)
    except ApiError as exc:
        if exc.status in REFUSED:
            raise
        verdict = Verdict.NO_AGENT if exc.status == NO_AGENT else Verdict.ERROR
        return NodeCheck(node, verdict, error=exc.message)
    return NodeCheck(node, verdict_of(answer["conditions"]), answer)


@health_app.command("check")
def check(
    node: Annotated[
        str | None,
        typer.Argument(help="the node (default: every node with an agent, one after another)"),
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Run every GPU health check of a node now, through its agent (admin), and print each
    check's condition; without NODE, every node with an agent and a summary. Exits 1 when a
    check fails or a node could not be checked."""
    from kiban.sdk.client import Client

    with Client() as api:
        if node is not None:
            single(api, node, output)
            return
        results = check_all(api)
    if output.structured:
        print_document([r.as_document() for r in results], output)
    else:
        render.out.print(summary_table(results, render.current_time()))
    checked = [r for r in results if r.verdict is not Verdict.NO_AGENT]
    if not checked:
        fail("no node has a health agent (kiban node-agent) to run its checks")
    if any(r.verdict.fails for r in results):
        raise typer.Exit(1)


def single(api: Client, node: str, output: Output) -> None:
    """One node's check, each condition on a line; exit 1 when it fails."""
    answer = api.check_node(node)  # an error is the CLI's one error line, exit 1
    verdict = verdict_of(answer["conditions"])
    if output.structured:
        print_document(answer, output)
    else:
        render.out.print(conditions_table(answer["conditions"]))
        checked = render.when(answer["taken_at"])
        render.err.print(
            render.escape(f"node {answer['node']}: {verdict.value} (checked {checked})")
        )
    if verdict.fails:
        raise typer.Exit(1)


def check_all(api: Client) -> list[NodeCheck]:
    """Every node in turn, with a line on stderr saying which it is at."""
    names = [n["name"] for n in api.nodes()]
    results = []
    with render.err.status("checking") as status:
        for index, name in enumerate(names, 1):
            status.update(render.escape(f"checking {name} ({index} of {len(names)})"))
            results.append(check_one(api, name))
    return results


def conditions_table(conditions: list[dict[str, Any]]) -> Table:
    """Each check's condition: status, reason, message."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("CHECK", "STATUS", "REASON", "MESSAGE"):
        table.add_column(column)
    for c in conditions:
        table.add_row(*render.cells(c["type"], c["status"], c["reason"], c["message"] or "-"))
    return table


def summary_table(results: list[NodeCheck], now: float) -> Table:
    """One row per node: its verdict, the checks behind it, when it was checked."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NODE", "RESULT", "CONDITIONS", "CHECKED"):
        table.add_column(column)
    for r in results:
        if r.answer is None:
            conditions, checked = r.error or "-", "-"
        else:
            notable = [c for c in r.answer["conditions"] if c["status"] != "False"]
            conditions = render.conditions_text(notable)
            checked = f"{render.age(r.answer['taken_at'], now)} ago"
        table.add_row(*render.cells(r.node, r.verdict.value, conditions, checked))
    return table
