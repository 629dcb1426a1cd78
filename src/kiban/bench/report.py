"""The readable tables of ``kiban bench``: cases side by side, against the goals."""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table

from kiban.bench.machine import machine_line
from kiban.bench.scheduler import GOAL_P99_CYCLE_MS, GOAL_PLACEMENTS_PER_S
from kiban.bench.submit import (
    GOAL_AUDIT_RATIO,
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
    if settings.get("audit_compare"):
        rows += [
            (
                "with audit log",
                "audit_on_submissions_per_s",
                None,
                "/s",
                "back to back as above, two servers keeping the audit log (pooled)",
            ),
            (
                "without audit log",
                "audit_off_submissions_per_s",
                None,
                "/s",
                "the same on two servers started with --no-audit, between them (ABBA)",
            ),
            (
                "audit ratio",
                "audit_ratio",
                f">= {GOAL_AUDIT_RATIO:g}",
                "",
                "with over without: what appending the audit records costs",
            ),
            (
                "server CPU, with/without",
                "audit_server_cpu_ms_on",
                None,
                " ms",
                "per submission, with the audit log and without (less swayed by a busy machine)",
            ),
            (
                "audit records",
                "audit_records",
                None,
                "",
                "in the audited servers' logs, their hash chains verified",
            ),
        ]
    goal_keys = {"submissions_per_s", "p99_ms", "submit_to_running_p99_ms", "audit_ratio"}
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
            if key == "audit_server_cpu_ms_on":
                cells.append(f"{_num(value)} / {_num(entry.get('audit_server_cpu_ms_off'), ' ms')}")
                continue
            if key == "audit_records":
                intact = "intact" if entry.get("audit_intact") else "BROKEN"
                cells.append(f"{_num(value)}, {intact}")
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


def scheduler_table(report: dict[str, Any]) -> Table:
    """``kiban bench scheduler``: the main case and the many-queue case side by side."""
    settings = report["settings"]
    cases = [(f"{settings['queues']:,} queues", report)]
    big = report.get(f"queues_{settings['big_queues']}")
    if big is not None:
        cases.append((f"{settings['big_queues']:,} queues", big))
    contended = report.get("contended")
    if contended is not None:  # the same jobs on a cluster far too small for them
        cases.append(("contended, StrictFIFO", contended))
        cases.append(("contended, BestEffortFIFO", contended["best_effort_fifo"]))
    table = Table(title="kiban bench scheduler", title_justify="left", header_style="bold")
    table.add_column("measure")
    for name, _ in cases:
        table.add_column(name, justify="right")
    table.add_column("goal", justify="right")
    table.add_column("what it means", style="dim", overflow="fold")
    rows: list[tuple[str, str, str | None, str, str]] = [
        (
            "placements/s",
            "placements_per_s",
            f">= {GOAL_PLACEMENTS_PER_S:,.0f}",
            "",
            "replicas placed / time in schedule(), every cycle counted",
        ),
        ("p50 cycle", "p50_cycle_ms", None, " ms", "one schedule() call"),
        (
            "p99 cycle",
            "p99_cycle_ms",
            f"<= {GOAL_P99_CYCLE_MS:g} ms",
            " ms",
            "same, 99th percentile",
        ),
        ("p99 admitting cycle", "p99_admitting_cycle_ms", None, " ms", "of cycles that admitted"),
        (
            "p99 cycle + reading waits",
            "p99_cycle_reading_waits_ms",
            None,
            " ms",
            "the cycle and every Wait it gives, numbered (the control loop reads them all)",
        ),
        ("waits per cycle", "waits_per_cycle", None, "", "jobs left waiting, on average"),
        (
            "first cycle",
            "first_cycle_ms",
            None,
            " ms",
            "the backlog's first pass: the fullest window",
        ),
        (
            "first cycle placements/s",
            "first_cycle_placements_per_s",
            None,
            "",
            "its replicas placed / its time",
        ),
        ("peak RSS", "peak_rss_mb", None, " MB", "the process's, so far (ru_maxrss)"),
        ("jobs admitted", "jobs_admitted", None, "", "of the jobs waiting at the start"),
        ("starts", "starts", None, "", "admissions, restarts of preempted jobs included"),
        ("jobs preempted", "jobs_preempted", None, "", "victims stopped (they wait again)"),
        ("replicas placed", "replicas_placed", None, "", "each admitted job's gang"),
        ("cycles", "cycles", None, "", "calls of schedule()"),
        ("admitting cycles", "admitting_cycles", None, "", "cycles that admitted a job"),
        ("jobs per snapshot", "max_jobs_in_snapshot", None, "", "at most (window per queue)"),
        ("core time", "core_s", None, " s", "in schedule()"),
        ("snapshot building", "snapshot_build_s", None, " s", "the benchmark's, not the core's"),
        ("capacity index", "index_build_s", None, " s", "built at start, then kept up to date"),
        ("simulated time", "simulated_s", None, " s", "running jobs finished meanwhile"),
    ]
    goal_keys = {"placements_per_s", "p99_cycle_ms"}
    for label, key, goal, unit, meaning in rows:
        cells = []
        for _, entry in cases:
            value = entry.get(key)
            if key == "jobs_admitted":
                cells.append(f"{_num(value)} of {_num(entry['jobs'])}")
                continue
            mark = _mark(entry, key) if key in goal_keys else ""
            cells.append(_num(value, unit) + mark)
        table.add_row(label, *cells, goal or "", meaning)
    table.add_row("stopped", *(entry["stopped"] for _, entry in cases), "", "")
    cited = ", ".join(f"{c['name']} {c['value']:g}/s" for c in report["cited"].values())
    notes = [
        f"cluster: {settings['nodes']:,} nodes x {settings['gpus_per_node']} GPUs, "
        f"{settings['busy_gpus']:,} GPUs busy ({settings['running_jobs']:,} running jobs); "
        f"{settings['jobs']:,} Philly-sized jobs for {settings['jobs_gpus']:,} GPUs; "
        f"{settings['cohorts']} cohorts; seed {settings['seed']}",
        f"placements/s against kube-scheduler's threshold: "
        f"x{_num(report['vs_kube_scheduler_threshold'])}; cited, not measured here: {cited}",
    ]
    if contended is not None:
        both = contended["side_by_side"]
        notes.append(
            f"contended: {contended['nodes']:,} nodes, {contended['busy_gpus']:,} of "
            f"{contended['gpus']:,} GPUs busy, the same jobs, {settings['contended_cycles']} "
            f"cycles at most; p99 cycle BestEffortFIFO / StrictFIFO "
            f"x{_num(both['p99_cycle_ms_best_effort_over_strict'])}, reading every wait / not "
            f"x{_num(both['p99_cycle_ms_reading_waits_over_not'])}"
        )
    side = report.get("side_by_side")
    if side:
        notes.append(
            f"side by side ({side['what']}): placements/s x{_num(side['placements_per_s_ratio'])}, "
            f"p99 cycle x{_num(side['p99_cycle_ms_ratio'])}"
        )
    if settings["profiled"]:
        notes.append("profiled: cProfile inflates every time above")
    notes.append(f"machine: {machine_line(report['machine'])}")
    table.caption = "\n".join(notes)
    table.caption_justify = "left"
    return table


def _cpu(entry: dict[str, Any]) -> str:
    """A phase's CPU time per pod, process by process, in the caption's order."""
    cpu = entry.get("cpu_ms_per_pod") or {}
    names = ("this process", "kube-apiserver", "etcd", "kwok", "kube-scheduler")
    return " + ".join(_num(cpu[n]) for n in names if n in cpu)


def kube_table(report: dict[str, Any]) -> Table:
    """``kiban bench kube``: each phase's pods/s, against raw creation and kube-scheduler."""
    settings = report["settings"]
    raw_create = report["raw_create_pods_per_s"]
    sched = report["kube_scheduler_pods_per_s"]
    table = Table(title="kiban bench kube", title_justify="left", header_style="bold")
    for name in ("phase", "pods/s", "time", "last pod created", "vs raw create"):
        table.add_column(name, justify="left" if name == "phase" else "right")
    table.add_column("vs kube-scheduler", justify="right")
    table.add_column("CPU ms/pod", justify="right")
    table.add_column("what it means", style="dim", overflow="fold")
    raw = report["raw"]
    rows: list[tuple[str, float, float, Any, str, str]] = [
        (
            "raw create",
            raw["create_pods_per_s"],
            raw["create_s"],
            raw["last_created_s"],
            "",
            "the create calls only, pods bound by nodeName: the machine's limit",
        ),
        (
            "raw to Running",
            raw["pods_per_s"],
            raw["seconds"],
            raw["last_created_s"],
            _cpu(raw),
            "same pods, until KWOK has made the last one Running",
        ),
    ]
    for key, label, meaning in (
        ("kube_scheduler", "kube-scheduler", "same pods without nodeName, bound by it"),
        (
            "kube_scheduler_backlog",
            "kube-scheduler, backlog",
            "same, all created before it starts: its first bind to all Running",
        ),
        ("kiban_gang", "kiban, one gang", "one job of all the pods, submission to all Running"),
        ("kiban_jobs", "kiban, single jobs", "one-replica jobs, submission to all Running"),
    ):
        entry = report[key]
        rows.append(
            (
                label,
                entry["pods_per_s"],
                entry["seconds"],
                entry["last_created_s"],
                _cpu(entry),
                meaning,
            )
        )
    for label, pods_per_s, seconds, created, cpu, meaning in rows:
        table.add_row(
            label,
            _num(pods_per_s),
            _num(seconds, " s"),
            _num(created, " s"),
            _num(pods_per_s / raw_create if raw_create else None),
            _num(pods_per_s / sched if sched else None),
            cpu,
            meaning,
        )
    met = report["goals_met"]
    marks = {k: " [green]✓[/green]" if v else " [red]✗[/red]" for k, v in met.items()}
    table.add_row(
        "[bold]kiban[/bold]",
        _num(report["kiban_pods_per_s"]),
        "",
        "",
        f"{_num(report['kiban_vs_raw'])}{marks['kiban_vs_raw']}",
        f"{_num(report['kiban_vs_kube_scheduler'])}{marks['kiban_vs_kube_scheduler']}",
        "",
        f"the slower kiban phase; goals: >= {report['goals']['kiban_vs_raw']:g} of raw create, "
        f">= {report['goals']['kiban_vs_kube_scheduler']:g}x kube-scheduler",
    )
    rss = ", ".join(f"{k} {v:,.0f} MB" for k, v in settings["control_plane_rss_mb"].items())
    table.caption = "\n".join(
        [
            f"cluster: {settings['nodes']:,} fake nodes x {settings['gpus_per_node']} GPUs "
            f"(KWOK), {settings['pods']:,} pods of {settings['gpus_per_pod']} GPUs per phase, "
            f"{settings['workers']} requests in flight for raw/kube-scheduler; each phase on an "
            f"emptied cluster; control plane up in {settings['control_plane_setup_s']:g} s",
            "CPU ms/pod: this process (the client, or kiban) + kube-apiserver + etcd + kwok "
            "+ kube-scheduler, over the phase, per pod",
            f"control plane memory at the end: {rss}",
            f"machine: {machine_line(report['machine'])}",
        ]
    )
    table.caption_justify = "left"
    return table
