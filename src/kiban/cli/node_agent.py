"""``kiban node-agent``: check a node's GPUs every interval, report to kiban, serve /metrics.

``--once`` runs one pass and prints the conditions (a table, or ``--json`` the reports): the
quick look on a GPU machine, and what ``scripts/gpu-check.sh`` records as fixtures.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kiban.cli.failure import fail

if TYPE_CHECKING:
    from kiban.health.agent import ConditionSink, NodeAgent
    from kiban.health.report import NodeHealthReport


def parse_node(text: str) -> tuple[str, list[int] | None]:
    """``NAME`` or ``NAME=0,1``: a node and, optionally, its physical GPU indices."""
    name, sep, indices = text.partition("=")
    if not name:
        raise ValueError(f"--node {text!r}: the node's name is empty")
    if not sep:
        return name, None
    try:
        gpus = [int(i) for i in indices.split(",") if i.strip()]
    except ValueError:
        raise ValueError(
            f"--node {text!r}: GPU indices must be whole numbers, e.g. {name}=0,1"
        ) from None
    if any(i < 0 for i in gpus):
        raise ValueError(f"--node {text!r}: GPU indices must not be negative")
    return name, gpus


def node_agent_command(
    node: Annotated[
        list[str] | None,
        typer.Option(
            help="a node this agent checks, NAME or NAME=0,1 (its physical GPU indices; "
            "default all); repeat for several (default: this host's name, or $KIBAN_NODE)",
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(envvar="KIBAN_URL", help="kiban's API, where reports go (none: no reports)"),
    ] = None,
    token: Annotated[
        str | None, typer.Option(envvar="KIBAN_TOKEN", help="admin token for the reports")
    ] = None,
    listen: Annotated[
        str, typer.Option(help="HOST:PORT for /metrics, /check and /healthz (port 0: any free)")
    ] = "127.0.0.1:0",
    interval: Annotated[
        float | None,
        typer.Option(
            help="seconds between checks (default 30, or what the control plane answers; "
            "given: kept)",
            min=0.1,
        ),
    ] = None,
    check_timeout: Annotated[
        float, typer.Option(help="seconds a reading or a check may take before it is cut off")
    ] = 10.0,
    readings_dir: Annotated[
        Path | None,
        typer.Option(help="read DIR/NODE.json (a NodeReading) instead of NVML (fault injection)"),
    ] = None,
    thresholds: Annotated[
        Path | None, typer.Option(help="YAML file of check thresholds (HealthThresholds)")
    ] = None,
    kubernetes: Annotated[
        bool,
        typer.Option(
            "--kubernetes", help="also write the conditions on the Kubernetes Node objects"
        ),
    ] = False,
    kubeconfig: Annotated[
        Path | None, typer.Option(help="with --kubernetes: kubeconfig (default: in-cluster)")
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="one pass: print the conditions and exit")
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="with --once: the reports as JSON")
    ] = False,
    with_parent: Annotated[
        bool,
        typer.Option(
            "--with-parent",
            help="stop when standard input ends (kiban up holds it open: the agent ends with "
            "its control plane, even one killed with -9)",
        ),
    ] = False,
) -> None:
    """Check the GPUs of one node (or the local executor's nodes) through NVML every interval:
    conditions in node-problem-detector's shape, reported to kiban and served as /metrics."""
    from kiban.clock import SystemClock
    from kiban.domain.errors import SpecError
    from kiban.health.agent import DEFAULT_INTERVAL_S, NodeAgent
    from kiban.health.sources import DirectoryReadings, NvmlReadings, ReadingSource
    from kiban.health.thresholds import HealthThresholds, load_thresholds

    names = node or [os.environ.get("KIBAN_NODE") or os.uname().nodename or "localhost"]
    try:
        parsed = [parse_node(text) for text in names]
    except ValueError as exc:
        fail(str(exc))
    nodes = [name for name, _ in parsed]
    gpus = {name: indices for name, indices in parsed if indices is not None}
    if check_timeout <= 0:
        fail("--check-timeout must be more than 0")
    if json_output and not once:
        fail("--json goes with --once")
    if url is not None and not token:
        fail("--url needs a token: --token or KIBAN_TOKEN")
    limits = HealthThresholds()
    if thresholds is not None:
        try:
            limits = load_thresholds(thresholds)
        except SpecError as exc:
            fail(f"{thresholds}: {exc}")
    source: ReadingSource
    if readings_dir is not None:
        if not readings_dir.is_dir():
            fail(f"--readings-dir {readings_dir} is not a directory")
        source = DirectoryReadings(readings_dir)
    else:
        source = NvmlReadings(gpus)
    sinks: list[ConditionSink] = []
    expected = {name: len(indices) for name, indices in gpus.items()}
    if kubernetes:
        from kiban.health.kube_conditions import NodeConditionWriter, core_api

        try:
            writer = NodeConditionWriter(core_api(kubeconfig))
            for name in nodes:
                if name not in expected:
                    count = writer.expected_gpus(name)
                    if count is not None:
                        expected[name] = count
        except Exception as exc:
            fail(f"cannot reach Kubernetes: {exc}")
        sinks.append(writer)
    reporter = None
    if url is not None and token:
        from kiban.health.reporting import ControlPlaneReporter

        reporter = ControlPlaneReporter(url, token)
    agent = NodeAgent(
        nodes,
        source,
        SystemClock(),
        thresholds=limits,
        expected_gpus=expected,
        interval_s=interval if interval is not None else DEFAULT_INTERVAL_S,
        follow_reply_interval=interval is None,
        check_timeout_s=check_timeout,
        reporter=reporter,
        sinks=sinks,
    )
    if once:
        reports = agent.check_many(agent.nodes)
        source.close()
        print_reports(reports, json_output)
        return
    serve_agent(agent, listen, with_parent)
    source.close()


def serve_agent(agent: NodeAgent, listen: str, with_parent: bool = False) -> None:
    """Serve HTTP and run the loop until SIGTERM or Ctrl-C (or, ``with_parent``, until
    standard input ends: the parent that held it open is gone)."""
    from kiban.cli import render
    from kiban.health.agent_server import AgentServer, parse_listen

    try:
        host, port = parse_listen(listen)
        server = AgentServer(agent, host, port)
    except ValueError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot listen on {listen}: {exc.strerror or exc}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if with_parent:
        threading.Thread(target=_stop_at_end_of_input, args=(stop,), daemon=True).start()
    server.start()
    render.err.print(
        f"kiban node-agent: {', '.join(agent.nodes)}; every {agent.interval_s:g} s; "
        f"serving http://{server.address}/metrics",
        highlight=False,
    )
    try:
        agent.run(stop)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def _stop_at_end_of_input(stop: threading.Event) -> None:
    """Read standard input to its end (nothing is written to it), then stop the agent."""
    while sys.stdin.buffer.read(4096):
        pass
    stop.set()


def print_reports(reports: list[NodeHealthReport], json_output: bool) -> None:
    import json

    from rich.table import Table

    from kiban.cli import render

    if json_output:
        print(json.dumps([r.model_dump(mode="json", by_alias=True) for r in reports], indent=2))
        return
    table = Table("NODE", "CHECK", "STATUS", "REASON", "MESSAGE", box=None, pad_edge=False)
    for report in reports:
        for condition in report.conditions:
            table.add_row(
                report.reading.node,
                condition.type.value,
                condition.status.value,
                condition.reason,
                condition.message,
            )
    render.out.print(table)
