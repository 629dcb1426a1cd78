"""Human-readable output of the CLI: tables and job descriptions (Rich)."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kiban.domain.quantity import format_duration, format_memory

# Piped output is not cut to 80 columns: scripts and logs get whole lines.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def cells(*values: object) -> list[str]:
    """Table cells from values, shown as they are (user text is never taken for markup)."""
    return [escape(str(v)) for v in values]


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(ts))


def age(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    return format_duration(max((now or time.time()) - ts, 0))


def duration(job: dict[str, Any]) -> str:
    start = job.get("startedAt")
    if start is None:
        return "-"
    return format_duration((job.get("finishedAt") or time.time()) - start)


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("ID", "QUEUE", "STATE", "REPLICAS", "GPUS", "AGE", "RUNTIME", "REASON"):
        table.add_column(column)
    for job in jobs:
        reason = job.get("reason") or {}
        reason_text = reason.get("code", "")
        if job.get("queuePosition"):
            reason_text += f" (#{job['queuePosition']} in queue)"
        table.add_row(
            *cells(
                job["id"],
                job["queue"],
                job["state"],
                job.get("replicaCount", ""),
                job.get("gpus", ""),
                age(job["submittedAt"]),
                duration(job),
                reason_text,
            )
        )
    return table


QUEUE_COLUMNS = (
    "QUEUE",
    "TENANT",
    "COHORT",
    "STRATEGY",
    "QUOTA",
    "GPUS IN USE",
    "PENDING",
    "RUNNING",
)


def gpus_per_flavor(amounts: dict[str, Any] | None, none: str = "-") -> str:
    """``h100:16 a100:8``; a policy without flavors shows its one amount alone (``8``)."""
    if amounts is None:
        return none
    if list(amounts) == ["default"]:
        return str(amounts["default"].get("gpu", 0))
    return " ".join(f"{flavor}:{amount.get('gpu', 0)}" for flavor, amount in amounts.items()) or "0"


def queue_row(q: dict[str, Any]) -> list[str]:
    """One queue's cells, in the order of QUEUE_COLUMNS."""
    return cells(
        q["name"],
        q["tenant"],
        q.get("cohort") or "-",
        q["strategy"],
        gpus_per_flavor(q.get("quota")),
        q["gpusInUse"],
        q["pending"],
        q["running"],
    )


def queues_table(queues: list[dict[str, Any]]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in QUEUE_COLUMNS:
        table.add_column(column)
    for q in queues:
        table.add_row(*queue_row(q))
    return table


def policy_versions_table(versions: list[dict[str, Any]]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("VERSION", "APPLIED", "BY", "FLAVORS", "QUEUES"):
        table.add_column(column)
    for v in versions:
        document = v.get("document") or {}
        flavors = [f.get("name", "?") for f in document.get("flavors") or [] if isinstance(f, dict)]
        queues = document.get("queues")
        table.add_row(
            *cells(
                v["version"],
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v["createdAt"])),
                v["createdBy"],
                ",".join(flavors) or "-",
                "default" if queues is None else len(queues),
            )
        )
    return table


def nodes_table(nodes: list[dict[str, Any]]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NODE", "GPUS", "IN USE", "CPUS", "MEMORY", "STATUS", "LABELS"):
        table.add_column(column)
    for n in nodes:
        status = "Ready"
        if n["cordoned"]:
            status = "Cordoned"
        elif not n["healthy"]:
            status = f"Unhealthy: {n['healthMessage']}"
        labels = ",".join(f"{k}={v}" for k, v in sorted(n["labels"].items()))
        table.add_row(
            *cells(
                n["name"],
                n["gpus"],
                n["gpusInUse"],
                f"{n['cpuMillis'] / 1000:g}",
                format_memory(int(n["memory"])),
                status,
                labels,
            )
        )
    return table


def describe_job(job: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """Spec summary, state, placement, the pending reason with its numbers, and the timeline."""
    spec = job.get("spec") or {}
    body = spec.get("spec", {})
    e = escape
    out.print(f"[bold]Job[/bold]       {e(job['id'])}  (name {e(job['name'])})")
    out.print(
        f"Tenant     {e(job['tenant'])}    Queue {e(job['queue'])}    Priority {job['priority']}"
    )
    out.print(f"State      [bold]{e(job['state'])}[/bold]    Attempt {job['attempt']}")
    if job.get("message"):
        out.print(f"Message    {e(job['message'])}")
    reason = job.get("reason")
    if reason:
        out.print(f"Waiting    [yellow]{e(reason['code'])}[/yellow]: {e(reason['message'])}")
        if job.get("queuePosition"):
            out.print(f"Position   #{job['queuePosition']} in queue {e(job['queue'])}")
    out.print(
        f"Submitted  {when(job['submittedAt'])}    Started {when(job.get('startedAt'))}    "
        f"Finished {when(job.get('finishedAt'))}    Runtime {duration(job)}"
    )
    out.print(
        e(
            f"Launcher   {body.get('launcher', 'none')}    minAvailable "
            f"{body.get('minAvailable', job.get('replicaCount'))}    maxRuntime "
            f"{body.get('maxRuntime', '-')}"
        )
    )
    for task in body.get("tasks", []):
        res = task.get("resources", {})
        out.print(
            e(
                f"Task       {task.get('name', 'worker')}: {task.get('replicas', 1)} x "
                f"(gpu {res.get('gpu', 0)}, cpu {res.get('cpu', 1)}, memory "
                f"{res.get('memory', '1Gi')})  command: {' '.join(task.get('command', []))}"
            )
        )
    replicas = job.get("replicas") or []
    if replicas:
        table = Table(box=None, pad_edge=False, header_style="bold", title_justify="left")
        for column in ("RANK", "TASK", "NODE", "GPUS", "PID", "STATE", "EXIT"):
            table.add_column(column)
        for r in replicas:
            table.add_row(
                *cells(
                    r["rank"],
                    f"{r['task']}[{r['index']}]",
                    r["node"],
                    ",".join(map(str, r["gpuIds"])) or "-",
                    r.get("pid") or "-",
                    r["state"],
                    "-" if r.get("exitCode") is None else r["exitCode"],
                )
            )
        out.print("Replicas")
        out.print(table)
    if events:
        out.print("Events")
        start = events[0]["at"]
        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in ("TIME", "+", "TYPE", "REASON", "MESSAGE"):
            table.add_column(column)
        for ev in events:
            table.add_row(
                *cells(
                    when(ev["at"]),
                    f"{ev['at'] - start:.1f}s",
                    ev["type"],
                    ev["reason"],
                    ev["message"],
                )
            )
        out.print(table)
