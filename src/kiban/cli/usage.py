"""``kiban usage``: GPU- and CPU-hours per tenant, user, queue, flavor or job over a window,
like Slurm's ``sacct``/``sreport``, with the work lost to preemption and node failures apart."""

from __future__ import annotations

import csv
import io
import json
import sys
from typing import Annotated, Any

import typer

from kiban.cli import render
from kiban.domain.errors import SpecError

FORMATS = ("table", "json", "csv")
CSV_COLUMNS = (
    "tenant",
    "key",
    "periodStart",
    "gpuHours",
    "cpuHours",
    "attempts",
    "jobs",
    "preemptedGpuHours",
    "nodeLostGpuHours",
    "cost",
)


def usage_command(
    by: Annotated[str, typer.Option("--by", help="tenant, user, queue, flavor or job")] = "tenant",
    since: Annotated[
        str,
        typer.Option("--since", help="a duration back from now (30d, 12h, 2w) or a date"),
    ] = "30d",
    until: Annotated[str | None, typer.Option("--until", help="as --since; default: now")] = None,
    granularity: Annotated[
        str | None, typer.Option("--granularity", help="day, week or month (UTC)")
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table, json or csv")] = "table",
) -> None:
    """Usage within a window from the accounting records: GPU-hours, CPU-hours, attempts and
    jobs, and the GPU-hours lost to preemption and to node failures (a member sees their
    tenant's, an admin every tenant's)."""
    from kiban.sdk.client import Client

    if output not in FORMATS:
        raise SpecError.single("--output", f"must be one of {', '.join(FORMATS)}, not {output!r}")
    with Client() as api:
        report = api.usage(by=by, since=since, until=until, granularity=granularity)
    if output == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    elif output == "csv":
        sys.stdout.write(usage_csv(report))
    else:
        render.out.print(usage_table(report), soft_wrap=True)


def usage_csv(report: dict[str, Any]) -> str:
    """The report's rows as CSV, a header first (times as Unix seconds)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in report["rows"]:
        writer.writerow(["" if row.get(c) is None else row[c] for c in CSV_COLUMNS])
    return text.getvalue()


def usage_table(report: dict[str, Any]) -> Any:
    """One line per group (and period), the window's totals last."""
    by = report["by"]
    periods = report.get("granularity") is not None
    priced = any(row.get("cost") is not None for row in report["rows"])
    columns = [*(["PERIOD"] if periods else []), by.upper()]
    if by not in ("tenant", "flavor"):
        columns.insert(len(columns) - 1, "TENANT")
    columns += ["GPU-HOURS", "CPU-HOURS", "JOBS", "ATTEMPTS", "PREEMPTED", "NODE-LOST"]
    if priced:
        columns.append("COST")
    lines: list[list[object]] = []
    for row in report["rows"]:
        line: list[object] = []
        if periods:
            line.append(render.date_time(row["periodStart"])[:10])
        if by not in ("tenant", "flavor"):
            line.append(row["tenant"] or "-")
        line.append(row["key"] or "-")
        line += [
            f"{row['gpuHours']:.2f}",
            f"{row['cpuHours']:.2f}",
            row["jobs"],
            row["attempts"],
            f"{row['preemptedGpuHours']:.2f}",
            f"{row['nodeLostGpuHours']:.2f}",
        ]
        if priced:
            line.append("-" if row.get("cost") is None else f"{row['cost']:.2f}")
        lines.append(line)
    rows = report["rows"]
    total: list[object] = ["TOTAL", *[""] * (len(columns) - 7 - priced)]
    total += [
        f"{sum(r['gpuHours'] for r in rows):.2f}",
        f"{sum(r['cpuHours'] for r in rows):.2f}",
        "",
        sum(r["attempts"] for r in rows),
        f"{sum(r['preemptedGpuHours'] for r in rows):.2f}",
        f"{sum(r['nodeLostGpuHours'] for r in rows):.2f}",
    ]
    if priced:
        total.append(f"{sum(r.get('cost') or 0.0 for r in rows):.2f}")
    return render.aligned(columns, [*lines, total])
