"""``kiban policy``: read the cluster policy, apply a new one, list its versions."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from kiban.cli import render
from kiban.cli.output import Output, OutputOpt, print_document
from kiban.domain.errors import SpecError

policy_app = typer.Typer(
    rich_markup_mode=render.HELP_MARKUP,
    help="Read and change the cluster policy: flavors, cohorts, queues, priority classes, "
    "fair share, topology.",
    no_args_is_help=True,
)


@policy_app.command("show")
def show(
    output: Annotated[str, typer.Option("--output", "-o", help="yaml or json")] = "yaml",
    effective: Annotated[
        bool, typer.Option("--effective", help="with every default filled in")
    ] = False,
) -> None:
    """The policy in force, as written (re-appliable with `kiban policy apply`)."""
    import yaml

    from kiban.sdk.client import Client

    if output not in ("yaml", "json"):
        raise SpecError.single("--output", f"must be yaml or json, not {output!r}")
    with Client() as api:
        record = api.policy()
    document = record["effective" if effective else "document"]
    if output == "json":
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    if record["version"]:
        applied = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record["createdAt"]))
        note = f"policy version {record['version']}, applied {applied} by {record['createdBy']}"
    else:
        note = "the built-in policy (none applied yet)"
    render.err.print(render.escape(note))


@policy_app.command("apply")
def apply(
    file: Annotated[str, typer.Argument(help="policy or cluster file (YAML or JSON); - for stdin")],
) -> None:
    """Make a policy file the current policy (admin); prints what changed and the drain plan:
    each queue left over its new quota, what it gives back, and when."""
    from kiban.domain.manifests import load_document
    from kiban.sdk.client import Client

    if file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(file).read_text()
        except OSError as exc:
            raise SpecError.single("", f"cannot read {file}: {exc.strerror}") from None
    document: dict[str, Any] = load_document(text)
    if "nodes" in document:
        # A cluster file's nodes are the local executor's, read by `kiban up`; the rest applies.
        document = {key: value for key, value in document.items() if key != "nodes"}
        render.err.print("(nodes are read by kiban up --config; applying the rest)")
    with Client() as api:
        change = api.apply_policy(document)
    render.err.print(render.escape(change.get("summary") or change["message"]))
    steps = change.get("drainPlan") or []
    if steps and "summary" in change:
        render.err.print("drain plan (this change preempts nothing itself):")
        for step in steps:
            render.err.print(render.escape(f"  {step['message']}"))


@policy_app.command("history")
def history(
    output: OutputOpt = Output.TABLE,
    limit: Annotated[int, typer.Option(help="at most this many versions")] = 20,
) -> None:
    """Applied versions of the policy, newest first (admin); ``-o wide`` adds each version's
    cohorts and priority classes."""
    from kiban.sdk.client import Client

    with Client() as api:
        versions = api.policy_versions(limit=limit)
    if output.structured:
        print_document(versions, output)
    else:
        render.out.print(render.policy_versions_table(versions, wide=output is Output.WIDE))
