"""``kiban health sweep``: start an allreduce sweep of the idle nodes, and with ``--wait``
show each block's and node's bus bandwidth against its baseline when its job has finished."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from kiban.cli import render
from kiban.cli.output import Output, OutputOpt, print_document

DEFAULT_SWEEP_EVERY_S = 6 * 3600.0
"""How often ``kiban up`` sweeps idle nodes unless told otherwise (``--sweep-every``)."""

SWEEP_COLUMNS = ("BLOCK/NODE", "NODES", "BUSBW GB/s", "BASELINE", "OF BASELINE", "DEGRADED")


def sweep_table(results: dict[str, Any], jobs: set[str] | None = None) -> Any:
    """The figures of blocks, then nodes (only those measured by ``jobs`` when given)."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in SWEEP_COLUMNS:
        table.add_column(column)
    for kind in ("blocks", "nodes"):
        for f in results[kind]:
            if jobs is not None and f["job"] not in jobs:
                continue
            table.add_row(
                *render.cells(
                    f["name"] if kind == "blocks" else f"  {f['name']}",
                    len(f["nodes"]),
                    f"{f['busbw']:.3g}",
                    f"{f['baseline']:.3g}",
                    f"{f['fraction']:.0%}",
                    "yes" if f["degraded"] else "no",
                )
            )
    return table


def sweep_command(
    wait: Annotated[
        bool, typer.Option("--wait", help="wait for the sweep's jobs and show their figures")
    ] = False,
    size_mb: Annotated[
        float | None, typer.Option("--size-mb", help="the all_reduce tensor, in MB")
    ] = None,
    iters: Annotated[int | None, typer.Option("--iters", help="timed all_reduces")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds --wait waits")] = 900.0,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Start an allreduce sweep now: one lowest-priority job per topology block of idle nodes
    (admin). Nodes whose bus bandwidth falls below a fraction of their baseline are marked
    AllreduceDegraded."""
    from kiban.sdk.client import Client

    with Client() as api:
        started = api.start_health_sweep(size_mb=size_mb, iters=iters)
        if not wait:
            if output.structured:
                print_document(started, output)
            else:
                _print_started(started)
            return
        if not output.structured:
            _print_started(started)
        deadline = time.monotonic() + timeout
        ended = [
            api.wait(job_id, timeout=max(deadline - time.monotonic(), 0.0))
            for job_id in started["jobs"]
        ]
        succeeded = {j["id"] for j in ended if j["state"] == "Succeeded"}
        for job in ended:
            if job["state"] != "Succeeded":
                render.err.print(render.escape(f"sweep job {job['id']} ended {job['state']}"))
        results = api.health_sweeps()
        while not succeeded <= {f["job"] for f in results["blocks"]}:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout:g}s waiting for the sweep's results")
            time.sleep(0.5)  # the control loop stores them on its next pass
            results = api.health_sweeps()
    if output.structured:
        print_document({**started, "results": results}, output)
    else:
        render.out.print(sweep_table(results, succeeded))


def _print_started(started: dict[str, Any]) -> None:
    for job_id, block in zip(started["jobs"], started["blocks"], strict=True):
        render.out.print(render.escape(f"{job_id}: {', '.join(block)}"))
    for skipped in started["skipped"]:
        nodes = ", ".join(skipped["block"])
        render.out.print(render.escape(f"skipped {nodes} ({skipped['name']}): {skipped['why']}"))
    if not started["jobs"]:
        render.out.print("no block of two or more idle nodes: nothing to measure")
