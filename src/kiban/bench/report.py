"""The readable table of ``kiban bench submit``: stores side by side, against the goals."""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table

from kiban.bench.machine import machine_line
from kiban.bench.submit import (
    GOAL_P99_MS,
    GOAL_SUBMISSIONS_PER_S,
    GOAL_SUBMIT_TO_RUNNING_P99_MS,
    STORES,
)


def _num(value: Any, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        text = f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    else:
        text = f"{value:,}"
    return text + unit


def _mark(entry: dict[str, Any], goal: str) -> str:
    met = entry.get("goals_met", {}).get(goal)
    if met is None:
        return ""
    return " [green]✓[/green]" if met else " [red]✗[/red]"


def report_table(report: dict[str, Any]) -> Table:
    """The report as a table: stores side by side, goals and whether they are met."""
    stores = [s for s in STORES if s in report]
    table = Table(title="kiban bench submit", title_justify="left", header_style="bold")
    table.add_column("measure")
    for store in stores:
        table.add_column(store, justify="right")
    table.add_column("goal", justify="right")
    table.add_column("what it means", style="dim", overflow="fold")
    settings = report["settings"]
    clients = settings["clients"]
    rate = settings["offered_rate_per_s"]
    rows: list[tuple[str, str, str | None, str, str]] = [
        (
            "submissions/s",
            "submissions_per_s",
            f">= {GOAL_SUBMISSIONS_PER_S:g}",
            "",
            f"most sustained: {clients} clients submitting back to back",
        ),
        (
            "p50 latency",
            "p50_ms",
            None,
            " ms",
            f"at {rate:g}/s offered over {clients} clients, from when each was due",
        ),
        ("p99 latency", "p99_ms", f"<= {GOAL_P99_MS:g} ms", " ms", "same, 99th percentile"),
        ("achieved rate", "achieved_rate_per_s", None, "/s", f"of the {rate:g}/s offered"),
        (
            "saturated p50",
            "saturated_p50_ms",
            None,
            " ms",
            f"back to back: about {clients} / rate (Little's law), the queue, not the server",
        ),
        ("saturated p99", "saturated_p99_ms", None, " ms", "same, 99th percentile"),
        (
            "submit to running p50",
            "submit_to_running_p50_ms",
            None,
            " ms",
            "POST to the replica's process spawned, idle server, one job at a time",
        ),
        (
            "submit to running p99",
            "submit_to_running_p99_ms",
            f"<= {GOAL_SUBMIT_TO_RUNNING_P99_MS:g} ms",
            " ms",
            "same, 99th percentile",
        ),
        (
            "server CPU/submission",
            "server_cpu_ms_per_submission",
            None,
            " ms",
            "kiban's process (API, control loop), at saturation",
        ),
        ("database CPU/submission", "db_cpu_ms_per_submission", None, " ms", "PostgreSQL"),
        ("client CPU/submission", "client_cpu_ms_per_submission", None, " ms", "this process"),
        ("jobs stored", "jobs_in_store", None, "", "by the load phases, counted by the server"),
        ("errors", "errors", None, "", "answers other than 201"),
    ]
    goal_keys = {"submissions_per_s", "p99_ms", "submit_to_running_p99_ms"}
    for label, key, goal, unit, meaning in rows:
        cells = []
        for store in stores:
            entry = report[store]
            if "skipped" in entry:
                cells.append("skipped" if key == "submissions_per_s" else "")
                continue
            value = entry.get(key)
            if key == "jobs_in_store":
                sent = (
                    entry["paced_submissions"]
                    + entry["saturated_submissions"]
                    + entry["warmup_submissions"]
                )
                cells.append(f"{_num(value)} of {_num(sent)}")
                continue
            prefix = ">= " if key.startswith("p") and entry.get("latency_is_lower_bound") else ""
            mark = _mark(entry, key) if key in goal_keys else ""
            cells.append(prefix + _num(value, unit) + mark)
        table.add_row(label, *cells, goal or "", meaning)
    notes = [f"machine: {machine_line(report['machine'])}"]
    for store in stores:
        if "skipped" in report[store]:
            notes.append(f"{store} skipped: {report[store]['skipped']}")
        elif report[store].get("first_error"):
            notes.append(f"{store} first error: {report[store]['first_error']}")
    table.caption = "\n".join(notes)
    table.caption_justify = "left"
    return table
