"""Human-readable output of the CLI: tables and job descriptions (Rich).

Importing this module imports no Rich: ``out`` and ``err`` (the consoles of stdout and stderr)
are made on first use and each function imports what it draws with, so that a command that
prints nothing of Rich's (``kiban --version``, a TAB completion) does not pay for it.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from kiban.cli import HELP_MARKUP
from kiban.cli.quick import loading
from kiban.domain.quantity import format_duration
from kiban.scheduler import units

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.table import Table
    from rich.text import Text

__all__ = ["HELP_MARKUP", "err", "out"]

T = TypeVar("T")


@functools.cache
def stdout_console() -> Console:
    """stdout's console. Piped output is not cut to 80 columns: scripts and logs get whole
    lines."""
    with loading():
        from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


@functools.cache
def stderr_console() -> Console:
    with loading():
        from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def __getattr__(name: str) -> Any:
    if name == "out":
        return stdout_console()
    if name == "err":
        return stderr_console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    out: Console
    err: Console


def escape(text: str) -> str:
    """``text`` with Rich's markup characters escaped, so that it prints as it is."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def say(line: str) -> None:
    """A progress line on stderr (stdout stays for results)."""
    stderr_console().print(line, markup=False)


def run_or_exit(
    run: Callable[[], T], errors: tuple[type[Exception], ...], interrupted: str = "interrupted"
) -> T:
    """Run a long command's work; its expected errors and Ctrl-C end it with one line, no trace
    (exit 1 and 130)."""
    try:
        return run()
    except errors as exc:
        stderr_console().print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        stderr_console().print(interrupted, markup=False)
        raise typer.Exit(130) from None


def report_console(as_json: bool) -> Console:
    """Where a report's table goes: stdout, or stderr when stdout carries the JSON. Piped or
    logged, the table keeps its width rather than folding into 80 columns."""
    from rich.console import Console

    stream = sys.stderr if as_json else sys.stdout
    return Console(file=stream, highlight=False, width=None if stream.isatty() else 160)


def json_line(data: Any) -> None:
    """One compact JSON object on stdout, the machine-readable form of a report."""
    sys.stdout.write(json.dumps(data, separators=(",", ":")) + "\n")


def cells(*values: object) -> list[str]:
    """Table cells from values, shown as they are (user text is never taken for markup)."""
    return [escape(str(v)) for v in values]


def current_time() -> float:
    """Now, for ages and forecasts (tests replace it to match the server's manual clock)."""
    return time.time()


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(ts))


def age(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    return format_duration(max((now or current_time()) - ts, 0))


def duration(job: dict[str, Any]) -> str:
    start = job.get("startedAt")
    if start is None:
        return "-"
    return format_duration((job.get("finishedAt") or current_time()) - start)


def rough_duration(seconds: float) -> str:
    """A duration to the minute once it is a minute or more: ``45s``, ``12m``, ``1h05m``."""
    total = round(seconds)
    if total < 60:
        return f"{total}s"
    minutes = round(total / 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def eta(job: dict[str, Any], now: float | None = None) -> str:
    """When a waiting job should start, relative to now: ``in 12m`` (``in ~12m`` when the
    forecast rests on estimated run times); ``-`` when there is no forecast; ``now`` when the
    forecast time has come; nothing for a job that is not waiting."""
    if job.get("state") != "Pending":
        return ""
    start = job.get("eta")
    if start is None:
        return "-"
    ahead = start - (current_time() if now is None else now)
    about = "~" if job.get("etaEstimated") else ""
    return "now" if ahead < 1 else f"in {about}{rough_duration(ahead)}"


def aligned(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Text:
    """A listing as ``kubectl get`` prints one: columns left-aligned two spaces apart under a
    bold header, each row one line (print it with ``soft_wrap=True``: a terminal narrower
    than it folds the lines; nothing is cut). Rich's Table lays out the same rows at about
    1.5 ms a row, longer than the rest of ``kiban ls`` for a hundred jobs; widths here are
    Rich's ``cell_len``, so wide characters align too."""
    with loading():
        from rich.cells import cell_len
        from rich.text import Text

    lines = [list(columns), *([str(v) for v in row] for row in rows)]
    widths = [max(cell_len(line[i]) for line in lines) for i in range(len(columns))]
    text = Text()
    for index, line in enumerate(lines):
        padded = (c + " " * (w - cell_len(c)) for c, w in zip(line, widths, strict=True))
        text.append(("\n" if index else "") + "  ".join(padded).rstrip())
        if index == 0:
            text.stylize("bold", 0, len(text))
    return text


def jobs_table(jobs: list[dict[str, Any]], now: float | None = None, wide: bool = False) -> Text:
    """One row per job; ``wide`` adds its name, tenant, priority, submission time and
    message."""
    columns = ["ID", "QUEUE", "STATE", "REPLICAS", "GPUS", "AGE", "RUNTIME", "REASON", "ETA"]
    if wide:
        columns += ["NAME", "TENANT", "PRIORITY", "SUBMITTED", "MESSAGE"]
    rows = []
    for job in jobs:
        reason = job.get("reason") or {}
        reason_text = reason.get("code", "")
        if job.get("queuePosition"):
            reason_text += f" (#{job['queuePosition']} in queue)"
        row: list[object] = [
            job["id"],
            job["queue"],
            job["state"],
            job.get("replicaCount", ""),
            job.get("gpus", ""),
            age(job["submittedAt"], now),
            duration(job),
            reason_text,
            eta(job, now),
        ]
        if wide:
            row += [
                job["name"],
                job["tenant"],
                job["priority"],
                date_time(job["submittedAt"]),
                job.get("message") or "",
            ]
        rows.append(row)
    return aligned(columns, rows)


def date_time(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


QUEUE_COLUMNS = (
    "QUEUE",
    "TENANT",
    "COHORT",
    "STRATEGY",
    "FLAVOR",
    "NOMINAL",
    "USED",
    "BORROWED",
    "LENT",
    "PENDING",
    "RUNNING",
    "USAGE",
    "STANDING",
)


def gpus_per_flavor(amounts: dict[str, Any] | None, none: str = "-") -> str:
    """``h100:16 a100:8``; a policy without flavors shows its one amount alone (``8``)."""
    if amounts is None:
        return none
    if list(amounts) == ["default"]:
        return str(amounts["default"].get("gpu", 0))
    return " ".join(f"{flavor}:{amount.get('gpu', 0)}" for flavor, amount in amounts.items()) or "0"


def gpu_hours(seconds: float | None) -> str:
    """GPU-seconds (or weighted resource-seconds) as hours: ``4.0``; two significant digits
    below 0.05 (``0.0057``), so that a little recent use does not read as none."""
    if seconds is None:
        return "-"
    hours = seconds / 3600
    return f"{hours:.2g}" if 0 < hours < 0.05 else f"{hours:.1f}"


def pending_text(jobs: int, gpus: int) -> str:
    """``3 (24 GPUs)``, or ``0``."""
    return f"{jobs} ({gpus} GPUs)" if jobs else "0"


def flavor_name(flavor: str) -> str:
    """The implicit flavor of a policy that declares none is shown as ``-``."""
    return "-" if flavor == "default" else flavor


def borrowed_text(borrowed: int, over_quota: int) -> str:
    """``4``; with use that no one lends (after a quota was lowered), ``0 +3 over quota``."""
    return f"{borrowed} +{over_quota} over quota" if over_quota else str(borrowed)


def _flavor_cells(f: dict[str, Any]) -> list[object]:
    return [
        flavor_name(f["flavor"]),
        "-" if f.get("nominal") is None else f["nominal"],
        f["used"],
        borrowed_text(f["borrowed"], f.get("overQuota", 0)),
        f["lent"],
        pending_text(f["pendingJobs"], f["pendingGpus"]),
    ]


def strategy_text(q: dict[str, Any]) -> str:
    """``StrictFIFO``; a scavenger queue's ``StrictFIFO,scavenger`` (its jobs use idle capacity
    only: any job needing their nodes preempts them)."""
    return f"{q['strategy']},scavenger" if q.get("scavenger") else str(q["strategy"])


def queue_rows(q: dict[str, Any]) -> list[list[str]]:
    """A queue's rows, in the order of QUEUE_COLUMNS: one when it has at most one flavor;
    otherwise its totals (FLAVOR ``all``) and then one row per flavor."""
    flavors = q.get("flavors") or []
    queue_cells: list[object] = [
        q["name"],
        q["tenant"],
        q.get("cohort") or "-",
        strategy_text(q),
    ]
    tenant_cells: list[object] = [
        q["running"],
        f"{gpu_hours(q.get('usage'))} GPU-h",
        gpu_hours(q.get("standing")),
    ]
    if len(flavors) == 1:
        return [cells(*queue_cells, *_flavor_cells(flavors[0]), *tenant_cells)]
    nominal = q.get("gpuQuota")
    totals: list[object] = [
        "all" if flavors else "-",
        "-" if nominal is None else nominal,
        q["gpusInUse"],
        borrowed_text(q.get("borrowed", 0), q.get("overQuota", 0)),
        q.get("lent", 0),
        pending_text(q["pending"], q.get("pendingGpus", 0)),
    ]
    rows = [cells(*queue_cells, *totals, *tenant_cells)]
    blank = [""] * 4
    for f in flavors:
        rows.append(cells(*blank, *_flavor_cells(f), "", "", ""))
    return rows


WIDE_QUEUE_COLUMNS = ("BORROW LIMIT", "LEND LIMIT", "WEIGHT")


def queues_table(queues: list[dict[str, Any]], wide: bool = False) -> Table:
    """A queue's rows (``queue_rows``); ``wide`` adds its borrowing and lending limits per
    flavor (``-``: none) and its fair-share weight."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in QUEUE_COLUMNS + (WIDE_QUEUE_COLUMNS if wide else ()):
        table.add_column(column)
    for q in queues:
        for i, row in enumerate(queue_rows(q)):
            if wide:
                row = row + (wide_queue_cells(q) if i == 0 else ["", "", ""])
            table.add_row(*row)
    return table


def wide_queue_cells(q: dict[str, Any]) -> list[str]:
    return cells(
        gpus_per_flavor(q.get("borrowingLimit") or None),
        gpus_per_flavor(q.get("lendingLimit") or None),
        f"{q.get('fairShareWeight', 1):g}",
    )


def policy_versions_table(versions: list[dict[str, Any]], wide: bool = False) -> Table:
    """One row per applied version; ``wide`` adds its cohorts and priority classes."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    columns = ["VERSION", "APPLIED", "BY", "FLAVORS", "QUEUES"]
    if wide:
        columns += ["COHORTS", "PRIORITY CLASSES"]
    for column in columns:
        table.add_column(column)
    for v in versions:
        document = v.get("document") or {}
        flavors = [f.get("name", "?") for f in document.get("flavors") or [] if isinstance(f, dict)]
        queues = document.get("queues")
        row: list[object] = [
            v["version"],
            date_time(v["createdAt"]),
            v["createdBy"],
            ",".join(flavors) or "-",
            "default" if queues is None else len(queues),
        ]
        if wide:
            row += [names_in(document.get("cohorts")), names_in(document.get("priorityClasses"))]
        table.add_row(*cells(*row))
    return table


def names_in(items: Any) -> str:
    """``a,b`` from a list of mappings with names, as a policy document writes them."""
    names = [str(i.get("name", "?")) for i in items or [] if isinstance(i, dict)]
    return ",".join(names) or "-"


def node_status(node: dict[str, Any]) -> str:
    """``Ready``, ``Cordoned (admin)`` / ``Cordoned (remediation)`` (who cordoned it), or
    ``Unhealthy: why``."""
    if node["cordoned"]:
        source = node.get("cordonSource")
        return f"Cordoned ({source})" if source else "Cordoned"
    if not node["healthy"]:
        return f"Unhealthy: {node['healthMessage']}"
    return "Ready"


def conditions_text(conditions: list[dict[str, Any]]) -> str:
    """A node's conditions that are not False: ``GpuEcc`` (True: the problem is there),
    ``GpuXid?`` (Unknown: cannot tell), comma-separated; ``ok`` when there are none."""
    shown = [c["type"] + ("?" if c["status"] == "Unknown" else "") for c in conditions]
    return ",".join(shown) or "ok"


def extended_text(amounts: dict[str, int]) -> str:
    """``nvidia.com/hostdev=8,hugepages-2Mi=4 GiB``; ``-`` for none."""
    shown = [
        f"{name}={units.size(amount) if name.startswith('hugepages-') else amount}"
        for name, amount in sorted(amounts.items())
    ]
    return ",".join(shown) or "-"


def nodes_table(nodes: list[dict[str, Any]], wide: bool = False) -> Table:
    """One row per node, its health checks' conditions that are not False among its columns;
    ``wide`` adds its free GPUs and its health message."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    columns = ["NODE", "GPUS", "IN USE", "CPUS", "MEMORY", "STATUS", "CONDITIONS", "LABELS"]
    if wide:
        columns += ["FREE", "HEALTH"]
    extended = any(n.get("extended") for n in nodes)
    if extended:  # only where some node advertises extended resources
        columns.append("RESOURCES")
    for column in columns:
        table.add_column(column)
    for n in nodes:
        labels = ",".join(f"{k}={v}" for k, v in sorted(n["labels"].items()))
        row: list[object] = [
            n["name"],
            n["gpus"],
            n["gpusInUse"],
            units.cpus(n["cpuMillis"]),
            units.size(int(n["memory"])),
            node_status(n),
            conditions_text(n.get("conditions") or []),
            labels,
        ]
        if wide:
            row += [max(n["gpus"] - n["gpusInUse"], 0), n.get("healthMessage") or "-"]
        if extended:
            row.append(extended_text(n.get("extended") or {}))
        table.add_row(*cells(*row))
    return table


def estimated_runtime(estimate: dict[str, Any]) -> str:
    """``describe``'s line on a run time estimated from history (a job with no maxRuntime)."""
    return (
        f"about {rough_duration(float(estimate['seconds']))}, estimated from "
        f"{estimate['basis']}, confidence {float(estimate['confidence']):.0%} "
        "(no maxRuntime: it plans, it never stops the job)"
    )


def waiting_lines(job: dict[str, Any], now: float | None = None) -> list[tuple[str, str]]:
    """``describe``'s lines on positions, forecast start, fair share, preemption, checkpoint."""
    lines: list[tuple[str, str]] = []
    now = current_time() if now is None else now
    if job.get("state") == "Pending":
        places = []
        if job.get("queuePosition"):
            places.append(f"#{job['queuePosition']} in queue {job['queue']}")
        if job.get("clusterPosition"):
            places.append(f"#{job['clusterPosition']} in the cluster")
        if places:
            lines.append(("Position", ", ".join(places)))
        if job.get("eta") is None:
            lines.append(
                (
                    "Starts",
                    "no estimate (a job it waits for has neither a maxRuntime nor run-time "
                    "history, or none yet)",
                )
            )
        else:
            basis = "forecast on estimated run times" if job.get("etaEstimated") else "forecast"
            lines.append(("Starts", f"{eta(job, now)} (about {when(job['eta'])}; {basis})"))
    estimate = job.get("estimatedRuntime")
    if estimate is not None:
        lines.append(("Run time", estimated_runtime(estimate)))
    if job.get("standing") is not None:
        lines.append(
            (
                "Standing",
                f"{gpu_hours(job['standing'])} GPU-hours per unit of weight "
                f"(tenant {job['tenant']}'s decayed usage; lower goes first)",
            )
        )
    if job.get("preemptedBy"):
        lines.append(("Preempted", f"by job {job['preemptedBy']}"))
    checkpoint = job.get("lastCheckpointAt")
    if checkpoint is not None:
        lines.append(("Checkpoint", f"{when(checkpoint)} ({age(checkpoint, now)} ago)"))
    elif job.get("state") == "Running":
        lines.append(("Checkpoint", "none reported"))
    lines += [("Executor", limit) for limit in job.get("executorLimits") or ()]
    return lines


def job_description(
    job: dict[str, Any], events: list[dict[str, Any]], now: float | None = None, wide: bool = False
) -> RenderableType:
    """Spec summary, state, placement, the pending reason with its numbers, where it stands and
    when it should start, and the timeline; ``wide`` adds the manifest as stored (YAML)."""
    from rich.console import Group
    from rich.table import Table

    spec = job.get("spec") or {}
    body = spec.get("spec", {})
    e = escape
    parts: list[RenderableType] = [
        f"[bold]Job[/bold]       {e(job['id'])}  (name {e(job['name'])})",
        f"Tenant     {e(job['tenant'])}    Queue {e(job['queue'])}    Priority {job['priority']}"
        + (f"    By {e(job['submittedBy'])}" if job.get("submittedBy") else ""),
        f"State      [bold]{e(job['state'])}[/bold]    Attempt {job['attempt']}",
    ]
    if job.get("message"):
        parts.append(f"Message    {e(job['message'])}")
    reason = job.get("reason")
    if reason:
        parts.append(f"Waiting    [yellow]{e(reason['code'])}[/yellow]: {e(reason['message'])}")
    for label, text in waiting_lines(job, now):
        parts.append(f"{label:<11}{e(text)}")
    parts.append(
        f"Submitted  {when(job['submittedAt'])}    Started {when(job.get('startedAt'))}    "
        f"Finished {when(job.get('finishedAt'))}    Runtime {duration(job)}"
    )
    parts.append(
        e(
            f"Launcher   {body.get('launcher', 'none')}    minAvailable "
            f"{body.get('minAvailable', job.get('replicaCount'))}    maxRuntime "
            f"{body.get('maxRuntime', '-')}"
        )
    )
    for task in body.get("tasks", []):
        res = task.get("resources", {})
        parts.append(
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
        parts += ["Replicas", table]
        for r in replicas:
            if r.get("waiting"):
                parts.append(escape(f"  rank {r['rank']} is {r['waiting']}"))
    if events:
        parts.append("Events")
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
        parts.append(table)
    if wide and spec:
        import yaml

        parts += ["Manifest", e(yaml.safe_dump(spec, sort_keys=False).rstrip())]
    return Group(*parts)
