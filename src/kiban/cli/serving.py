"""Serving commands: ``kiban serve``, ``services``, ``promote``, ``rollback``, ``chat``, and how
``kiban describe service NAME`` prints a service. Rich, httpx and the SDK are imported by the
commands that use them, so that registering these costs the CLI's start-up nothing."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kiban.cli import complete
from kiban.cli.failure import fail
from kiban.cli.output import Output, OutputOpt, print_document
from kiban.sdk.errors import ApiError

if TYPE_CHECKING:
    import httpx
    from rich.console import RenderableType
    from rich.table import Table

    from kiban.sdk.client import Client

ServiceArg = Annotated[
    str, typer.Argument(help="service name", autocompletion=complete.service_names)
]


def services_table(services: list[dict[str, Any]], wide: bool = False) -> Table:
    """One row per service; ``wide`` adds its runtime, queue, replica bounds and metric."""
    from rich.table import Table

    from kiban.cli import render

    table = Table(box=None, header_style="bold")
    columns = ["NAME", "TENANT", "STATE", "MODEL", "READY", "TRAFFIC", "URL"]
    if wide:
        columns += ["RUNTIME", "QUEUE", "REPLICAS", "SCALE ON"]
    for column in columns:
        table.add_column(column)
    for s in services:
        ready = sum(r["readyReplicas"] for r in s["revisions"] if r["trafficPercent"])
        wanted = sum(r["desiredReplicas"] for r in s["revisions"] if r["trafficPercent"])
        traffic = ", ".join(f"{rev} {share}%" for rev, share in s["traffic"].items()) or "-"
        row: list[object] = [
            s["name"],
            s["tenant"],
            s["state"],
            s["model"],
            f"{ready}/{wanted}",
            traffic,
            s.get("url") or "-",
        ]
        if wide:
            row += [
                s["runtime"],
                s["queue"],
                f"{s['minReplicas']}-{s['maxReplicas']}",
                s["scaleMetric"],
            ]
        table.add_row(*render.cells(*row))
    return table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _scaling(scaling: dict[str, Any] | None, ready: int) -> str:
    """The autoscaler's numbers for a revision: the averages and what one replica carries
    (CPU use as a share of one replica's request, averaged over the ``ready`` replicas)."""
    if not scaling:
        return "-"
    stable, panic, each = scaling["stableValue"], scaling["panicValue"], scaling["perReplica"]
    if scaling["metric"] == "cpu":
        share = max(ready, 1)
        text = (
            f"cpu {stable / share:.0%} (60 s), {panic / share:.0%} (6 s) of each replica's "
            f"request; target {each:.0%}"
        )
    else:
        text = f"{scaling['metric']} {stable:.2f} (60 s), {panic:.2f} (6 s); {each:.2f} each"
    if scaling["panicking"]:
        text += "; panic"
    return text + (f"; {scaling['note']}" if scaling["note"] else "")


def _cap_text(service: dict[str, Any]) -> str:
    """ ", at most N requests at once each", naming any revision taking traffic whose replicas
    have another cap (a canary whose model server batches differently)."""
    cap = service.get("replicaConcurrency") or 0
    others = [
        f"{r['name']}: {r['replicaConcurrency'] or 'no cap'}"
        for r in service.get("revisions", [])
        if r.get("trafficPercent") and r.get("replicaConcurrency", cap) != cap
    ]
    if not others:
        return f", at most {cap} requests at once each" if cap else ""
    said = f", at most {cap} requests at once each" if cap else ", no cap per replica"
    return f"{said} ({'; '.join(others)})"


def describe_service(
    service: dict[str, Any], events: list[dict[str, Any]], wide: bool = False
) -> RenderableType:
    """Revisions with their state and traffic, replicas, latency, URL, and the timeline (the
    last 15 events; ``wide``: all of them)."""
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table

    from kiban.cli import render

    e = escape
    parts: list[RenderableType] = [
        f"[bold]Service[/bold]   {e(service['name'])}    Tenant {e(service['tenant'])}",
        f"State     [bold]{e(service['state'])}[/bold]    URL {e(service.get('url') or '-')}",
    ]
    parts.append(
        e(
            f"Model     {service['model']} ({service['runtime']})    Queue {service['queue']}    "
            f"Priority class {service.get('priorityClass') or '(serving default)'}"
        )
    )
    target = service.get("scaleTarget")
    unit = "% of its CPU request" if service["scaleMetric"] == "cpu" else ""
    parts.append(
        e(
            f"Scaling   {service['minReplicas']} to {service['maxReplicas']} replicas on "
            f"{service['scaleMetric']}"
            + (f" (target {target:g}{unit} per replica)" if target else "")
            + _cap_text(service)
            + f"    Timeout {service['timeoutS']:g}s    "
            + ("public" if service["public"] else "tenant tokens only")
        )
    )
    stats = service.get("stats")
    if stats:
        parts.append(
            e(
                f"Traffic   {stats['rps']:.1f} req/s, {stats['inFlight']} in flight, "
                f"{stats['queued']} queued; latency p50 {_ms(stats.get('p50Ms'))}, "
                f"p99 {_ms(stats.get('p99Ms'))}"
            )
        )
    revisions = Table(title="Revisions", box=None, header_style="bold", title_justify="left")
    for column in ("REVISION", "ROLE", "STATE", "TRAFFIC", "READY", "AUTOSCALER", "MESSAGE"):
        revisions.add_column(column)
    for r in service["revisions"]:
        revisions.add_row(
            *render.cells(
                r["name"],
                r["role"] or "-",
                r["state"],
                f"{r['trafficPercent']}%",
                f"{r['readyReplicas']}/{r['desiredReplicas']}",
                _scaling(r.get("scaling"), r["readyReplicas"]),
                r["message"] or "",
            )
        )
    parts.append(revisions)
    replicas = Table(title="Replicas", box=None, header_style="bold", title_justify="left")
    for column in ("JOB", "REVISION", "STATE", "NODE", "READY", "REASON"):
        replicas.add_column(column)
    for p in service["replicas"]:
        replicas.add_row(
            *render.cells(
                p["job"],
                p["revision"],
                p["state"],
                p.get("node") or "-",
                "yes" if p["ready"] else "no",
                p.get("reason") or "",
            )
        )
    parts.append(replicas)
    if events:
        parts.append("[bold]Events[/bold]")
        for event in events if wide else events[-15:]:
            at = render.when(event["at"])
            parts.append(e(f"  {at}  {event['reason']:<20} {event['message']}"))
    return Group(*parts)


def serve_command(
    file: Annotated[str, typer.Argument(help="Service or InferenceService manifest; - for stdin")],
    wait: Annotated[
        bool, typer.Option("--wait", help="wait until the new revision serves (or fails)")
    ] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits at most")] = 600.0,
) -> None:
    """Create or change an inference service; prints its URL on stdout."""
    from rich.markup import escape

    from kiban.cli import render
    from kiban.cli.manifest_files import read_manifest
    from kiban.sdk.client import Client

    document = read_manifest(file)
    with Client() as api:
        service = api.apply_service(document)
        revision = service["revisions"][-1] if service["revisions"] else None
        what = "created" if len(service["revisions"]) <= 1 else "changed"
        render.err.print(
            escape(
                f"service {service['name']} {what}"
                + (
                    f"; newest revision {revision['name']} is {revision['state']}"
                    if revision
                    else ""
                )
            )
        )
        for warning in service.get("warnings") or []:
            render.err.print(f"warning: {warning}", markup=False, highlight=False)
        if wait and revision is not None:
            state = wait_for_revision(api, service["name"], revision["name"], timeout)
            render.err.print(escape(f"revision {revision['name']} is {state}"))
    if service.get("url"):
        print(service["url"])


def wait_for_revision(api: Client, service: str, revision: str, timeout: float) -> str:
    """Poll until the revision is Ready (returns its state) or Failed (raises, with why)."""
    deadline = time.monotonic() + timeout
    while True:
        found = api.service(service)
        current = next((r for r in found["revisions"] if r["name"] == revision), None)
        if current is None:
            raise ApiError(409, f"revision {revision} was replaced before it was ready")
        if current["state"] == "Failed":
            raise ApiError(409, f"revision {revision} failed: {current['message']}")
        if current["state"] in ("Ready", "Retired"):
            return str(current["state"])
        if time.monotonic() > deadline:
            raise ApiError(
                408, f"revision {revision} is still {current['state']} after {timeout:g}s"
            )
        time.sleep(0.5)


def services_command(output: OutputOpt = Output.TABLE) -> None:
    """List inference services: state, ready replicas, traffic split and URL."""
    from kiban.cli import render
    from kiban.sdk.client import Client

    with Client() as api:
        found = api.services()
    if output.structured:
        print_document(found, output)
    else:
        render.out.print(services_table(found, wide=output is Output.WIDE))


def traffic_text(traffic: dict[str, int]) -> str:
    """``chat-00001 90%, chat-00002 10%``; ``none`` while no revision serves."""
    return ", ".join(f"{revision} {share}%" for revision, share in traffic.items()) or "none"


def _with_role(service: dict[str, Any], role: str) -> str | None:
    return next((r["name"] for r in service["revisions"] if r.get("role") == role), None)


def traffic_line(before: dict[str, Any], after: dict[str, Any], until: str = "") -> str:
    """``traffic: chat-00001 100% (was chat-00001 50%, chat-00002 50%)``."""
    line = f"traffic: {traffic_text(after['traffic'])}"
    if after["traffic"] != before["traffic"]:
        return f"{line} (was {traffic_text(before['traffic'])})"
    return f"{line} ({until or 'unchanged'})"


def promote_lines(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What ``kiban promote`` changed, as people read it."""
    name, promoted = after["name"], _with_role(after, "stable")
    old = _with_role(before, "stable")
    retired = f"; {old} retired" if old is not None and old != promoted else ""
    return [f"service {name}: {promoted} takes all traffic{retired}", traffic_line(before, after)]


def rollback_lines(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What ``kiban rollback`` changed, as people read it: the canary dropped, or the revision
    before the stable one brought back, and the traffic then."""
    name = after["name"]
    canary_before, canary_after = _with_role(before, "canary"), _with_role(after, "canary")
    lines = []
    if canary_before is not None and canary_before != canary_after:
        lines.append(f"service {name} rolled back: canary {canary_before} dropped and retired")
    if canary_after is not None and canary_after != canary_before:
        lines.append(
            f"service {name} rolled back: revision {canary_after} comes back and takes all "
            "traffic once it is ready"
        )
    until = "until it is ready" if canary_after is not None else ""
    return [*lines, traffic_line(before, after, until)]


def promote_command(service: ServiceArg) -> None:
    """Send all of a service's traffic to its canary revision."""
    from kiban.cli import render
    from kiban.sdk.client import Client

    with Client() as api:
        before = api.service(service)
        after = api.promote(service)
    for line in promote_lines(before, after):
        render.err.print(render.escape(line))


def rollback_command(service: ServiceArg) -> None:
    """Drop a service's canary (or bring back the revision before the stable one)."""
    from kiban.cli import render
    from kiban.sdk.client import Client

    with Client() as api:
        before = api.service(service)
        after = api.rollback(service)
    for line in rollback_lines(before, after):
        render.err.print(render.escape(line))


def stream_chat(
    http: httpx.Client, url: str, messages: list[dict[str, str]], model: str
) -> Iterator[str]:
    """The assistant's reply as it streams (server-sent events of chat completion chunks)."""
    body = {"model": model, "messages": messages, "stream": True}
    with http.stream("POST", f"{url}/openai/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            response.read()
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            raise ApiError(response.status_code, f"the service answered: {message}")
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                return
            chunk = json.loads(data)
            for choice in chunk.get("choices", []):
                text = (choice.get("delta") or {}).get("content")
                if text:
                    yield text


def chat_command(
    service: ServiceArg,
    system: Annotated[str | None, typer.Option(help="a system prompt")] = None,
) -> None:
    """Chat with a text-generation service in the terminal; the reply streams as it is made.
    An empty line or end of input ends the chat."""
    import httpx

    from kiban.cli import render
    from kiban.sdk.client import Client

    with Client() as api:
        found = api.service(service)
        token = api.token
    url = found.get("url")
    if not url:
        raise ApiError(409, f"service {service} has no URL (is the router running?)")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    interactive = sys.stdin.isatty()
    with httpx.Client(headers=headers, timeout=httpx.Timeout(None, connect=10)) as http:
        while True:
            if interactive:
                render.err.print("[bold]you>[/bold] ", end="")
            line = sys.stdin.readline()
            if not line.strip():
                break
            messages.append({"role": "user", "content": line.rstrip("\n")})
            reply = []
            for piece in stream_chat(http, url, messages, found["model"]):
                reply.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()
            sys.stdout.write("\n")
            messages.append({"role": "assistant", "content": "".join(reply)})


def delete_command(
    kind: Annotated[str, typer.Argument(help="service")],
    name: Annotated[str, typer.Argument(help="its name", autocompletion=complete.service_names)],
) -> None:
    """Delete an inference service: its replicas stop, then it is gone (``kiban cancel`` ends
    a job)."""
    from rich.markup import escape

    from kiban.cli import render
    from kiban.sdk.client import Client

    if kind not in ("service", "svc"):
        fail(f"kiban delete takes `service NAME`, not {kind!r} (a job is ended by kiban cancel)")
    with Client() as api:
        api.delete_service(name)
    render.err.print(escape(f"service {name} is being deleted; its replicas stop"))
