"""``kiban bench submit --sustained``: submissions/s and p99 with a large backlog pending.

For each client count, two fresh ``kiban up`` servers in turn, side by side:

1. **backlog**: its store filled with ``pending`` waiting jobs before it starts, written
   straight into the store of the stopped server (a bulk insert of rows as a submission makes
   them: the job and its "Submitted" event, submitted earlier than anything measured, so they
   are ahead of the new jobs in their queue); its one node cordoned, so every job stays
   pending and the control loop judges the queue on every pass, as it would on a full cluster.
2. **empty_backlog**: the same with an empty store.

On each, ``clients`` keep-alive connections submit back to back (closed loop) for
``duration`` seconds; the rate is what the server sustained, the p99 is of each submission's
POST to its 201. With ``watch_s``, one more connection reads ``GET /api/v1/queues`` every
``watch_s`` seconds meanwhile, as someone watching ``kiban queues`` (or a dashboard) would.
Before the clock starts the loop has judged the backlog once (its head shows a reason), so a
pass over it runs during the measurement as it would on a busy cluster.

Goal (issue 21): at 64 clients at least 500/s with p99 at most 100 ms, and with the backlog no
more than 2x slower than without it, at each client count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from kiban.bench.loadgen import BenchError, HttpConnection, as_ms, prepare_request
from kiban.bench.machine import describe_machine, machine_line
from kiban.bench.servers import KibanServer
from kiban.bench.submit import STORES, _Workspace, _workspace, postgres_missing
from kiban.bench.submit_load import LoadResult, closed_loop, jobs_in_queue
from kiban.executors.base import NodeInfo
from kiban.services.auth import Principal
from kiban.services.jobs import ClusterFacts, new_job_id, prepare_submission
from kiban.services.policy import current_policy
from kiban.stats import percentile
from kiban.store.db import default_url, make_engine, session_factory
from kiban.store.models import Event, Job
from kiban.store.models_nodes import Node

Progress = Callable[[str], None]

BACKLOG_QUEUE = "default"
GOAL_CLIENTS = 64
GOAL_SUBMISSIONS_PER_S = 500.0
GOAL_P99_MS = 100.0
GOAL_SLOWDOWN = 2.0
PREFILL_CHUNK = 5_000


@dataclass(frozen=True)
class SustainedOptions:
    """Seconds of load per client count, the client counts, and the backlog's size."""

    duration_s: float = 60.0
    clients: tuple[int, ...] = (4, 16, 64)
    pending: int = 50_000
    store: str = "sqlite"
    watch_s: float = 0.0  # 0: nobody reads the queues meanwhile
    startup_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise ValueError("--sustained must be a positive number of seconds")
        if not self.clients or any(c < 1 for c in self.clients):
            raise ValueError("--clients must be positive numbers, e.g. 4,16,64")
        if len(set(self.clients)) != len(self.clients):
            raise ValueError("--clients names a client count twice")
        if self.pending < 1:
            raise ValueError("--pending must be at least 1")
        if self.watch_s < 0:
            raise ValueError("--watch must be 0 (off) or a positive number of seconds")
        if self.store not in STORES:
            raise ValueError(f"--store must be one of {', '.join(STORES)}; got {self.store}")


def backlog_job() -> dict[str, Any]:
    """A one-GPU job of the default queue: on a cordoned node it waits for ever."""
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "bench-backlog"},
        "spec": {
            "queue": BACKLOG_QUEUE,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 1,
                    "resources": {"gpu": 1, "cpu": 1, "memory": "1Gi"},
                    "command": ["true"],
                }
            ],
        },
    }


def prefill_backlog(db_url: str, count: int, before: float) -> str:
    """Store ``count`` pending jobs (and their "Submitted" events) as a submission makes them,
    submitted one millisecond apart and ending at ``before``; the id of the first.

    The store must belong to no running server (one control plane owns a store at a time).
    """
    engine = make_engine(db_url)
    try:
        sessions = session_factory(engine)
        with sessions() as session:
            template = _template(session, before)
            job_values = {k: v for k, v in vars(template.job).items() if not k.startswith("_")}
            event_values = {
                k: v for k, v in vars(template.events[0]).items() if not k.startswith("_")
            }
            # Random ids of one name meet now and then (about 1 in 2 stores of 50,000 has two
            # alike): each is drawn again until it is new.
            taken = set(session.scalars(select(Job.id)))
            first = ""
            for start in range(0, count, PREFILL_CHUNK):
                rows, made = [], []
                for i in range(start, min(start + PREFILL_CHUNK, count)):
                    at = before - (count - i) / 1000
                    job_id = new_job_id(template.job.name)
                    while job_id in taken:
                        job_id = new_job_id(template.job.name)
                    taken.add(job_id)
                    first = first or job_id
                    rows.append({**job_values, "id": job_id, "submitted_at": at})
                    made.append({**event_values, "object_name": job_id, "at": at})
                session.execute(insert(Job), rows)
                session.execute(insert(Event), made)
            session.commit()
            return first
    finally:
        engine.dispose()


def _template(session: Session, at: float) -> Any:
    """One submission of ``backlog_job`` as the API would prepare it."""
    nodes = tuple(
        NodeInfo(n.name, n.gpus, n.cpu_millis, n.memory, dict(n.labels or {}))
        for n in session.scalars(select(Node).order_by(Node.name))
    )
    return prepare_submission(
        session,
        Principal(name="bench", tenant=None, is_admin=True),
        backlog_job(),
        facts=ClusterFacts(nodes=nodes),
        at=at,
        policy=current_policy(session),
    )


# -- talking to a server ---------------------------------------------------------------------
async def _call(url: str, token: str, method: str, path: str) -> Any:
    conn = await HttpConnection.open(url)
    try:
        status, body = await conn.send(prepare_request(method, url, path, token))
    finally:
        await conn.close()
    if status != 200:
        raise BenchError(f"{method} {path} failed with HTTP {status}: {body[:300]!r}")
    return json.loads(body)


async def cordon_all(url: str, token: str) -> int:
    """Cordon every node of the server; how many there are."""
    nodes = await _call(url, token, "GET", "/api/v1/nodes")
    for node in nodes:
        await _call(url, token, "POST", f"/api/v1/nodes/{node['name']}/cordon")
    return len(nodes)


async def wait_until_judged(url: str, token: str, job_id: str, timeout_s: float) -> None:
    """Poll until the control loop has given ``job_id`` (the backlog's head) its reason."""
    deadline = time.monotonic() + timeout_s
    while True:
        job = await _call(url, token, "GET", f"/api/v1/jobs/{job_id}")
        reason = job.get("reason") or {}
        if reason.get("code") not in (None, "QueueBacklog"):
            return
        if time.monotonic() > deadline:
            raise BenchError(f"the control loop did not judge job {job_id} in {timeout_s:g}s")
        await asyncio.sleep(0.2)


async def load_and_watch(
    url: str, token: str, clients: int, options: SustainedOptions
) -> tuple[LoadResult, list[float]]:
    """The closed loop of submissions; with ``options.watch_s``, ``GET /api/v1/queues`` every
    ``watch_s`` seconds beside it (the latency of each read)."""
    done = asyncio.Event()
    reads: list[float] = []

    async def watch() -> None:
        conn = await HttpConnection.open(url)
        request = prepare_request("GET", url, "/api/v1/queues", token)
        loop = asyncio.get_running_loop()
        try:
            while not done.is_set():
                began = loop.time()
                status, body = await conn.send(request)
                if status != 200:
                    raise BenchError(f"GET /api/v1/queues: HTTP {status}: {body[:300]!r}")
                reads.append(loop.time() - began)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), options.watch_s)
        finally:
            await conn.close()

    async def load() -> LoadResult:
        try:
            return await closed_loop(
                url,
                token,
                clients=clients,
                count=None,
                duration_s=options.duration_s,
                document=backlog_job(),
            )
        finally:
            done.set()

    if not options.watch_s:
        return await load(), reads
    result, _ = await asyncio.gather(load(), watch())
    return result, reads


# -- phases ----------------------------------------------------------------------------------
def _store_url(server: KibanServer) -> str:
    return server.db_url or default_url(server.home)


def measure(
    space: _Workspace, options: SustainedOptions, clients: int, backlog: int, say: Progress
) -> dict[str, Any]:
    """One fresh server with ``backlog`` jobs pending, ``clients`` submitting back to back."""
    name = f"{'backlog' if backlog else 'empty'}-{clients}"
    server = space.server(options.store, name)
    with contextlib.ExitStack() as stack:
        stack.callback(server.stop)
        server.start()
        asyncio.run(cordon_all(server.url, server.token))
        head = None
        if backlog:
            server.stop()
            say(f"  filling the store with {backlog:,} pending jobs")
            head = prefill_backlog(_store_url(server), backlog, time.time())
            server.start()
            asyncio.run(
                wait_until_judged(server.url, server.token, head, options.startup_timeout_s)
            )
        before = asyncio.run(jobs_in_queue(server.url, server.token, BACKLOG_QUEUE))
        say(f"  {clients} clients for {options.duration_s:g}s, {before:,} jobs pending")
        cpu_before = server.cpu_seconds()
        try:
            result, reads = asyncio.run(load_and_watch(server.url, server.token, clients, options))
        except BenchError as exc:
            raise BenchError(f"{name}: {exc}; the server's log ends:\n{server.log}") from exc
        cpu = server.cpu_seconds() - cpu_before
        after = asyncio.run(jobs_in_queue(server.url, server.token, BACKLOG_QUEUE))
    answered = result.submitted + result.warmup
    watched = {}
    if options.watch_s:
        watched = {"queues_reads": len(reads), "queues_p99_ms": as_ms(percentile(reads, 99))}
    return {
        "submissions_per_s": round(result.rate, 1),
        "p50_ms": as_ms(percentile(result.latencies_s, 50)),
        "p99_ms": as_ms(percentile(result.latencies_s, 99)),
        "submitted": result.submitted,
        "errors": result.errors,
        "first_error": result.first_error or None,
        "pending_before": before,
        "pending_after": after,
        "stored_all": after == before + answered,
        "server_cpu_ms_per_submission": round(cpu * 1000 / max(answered, 1), 3),
        **watched,
    }


def goals_met(report: dict[str, Any]) -> dict[str, bool]:
    """Issue 21's goals: at 64 clients (or the most measured) 500/s and p99 <= 100 ms with
    the backlog, and at every client count no more than 2x slower than without it."""
    sustained = report["sustained"]
    headline = sustained[str(report["headline_clients"])]
    return {
        "submissions_per_s": headline["submissions_per_s"] >= GOAL_SUBMISSIONS_PER_S,
        "p99_ms": headline["p99_ms"] <= GOAL_P99_MS,
        "slowdown": all(s <= GOAL_SLOWDOWN for s in report["slowdown"].values()),
        "no_errors": all(
            e["errors"] == 0 and e["stored_all"]
            for part in ("sustained", "empty_backlog")
            for e in report[part].values()
        ),
    }


def run_sustained_bench(options: SustainedOptions, say: Progress | None = None) -> dict[str, Any]:
    """Every client count with the backlog and with an empty store, side by side; the
    JSON-ready report."""
    progress: Progress = say or (lambda _: None)
    if options.store == "postgresql" and (missing := postgres_missing()) is not None:
        raise BenchError(missing)
    machine = describe_machine()
    sustained: dict[str, Any] = {}
    empty: dict[str, Any] = {}
    with _workspace(options.startup_timeout_s) as space:
        for clients in options.clients:
            progress(f"{options.store}: {clients} clients, {options.pending:,} jobs pending")
            sustained[str(clients)] = measure(space, options, clients, options.pending, progress)
            progress(f"{options.store}: {clients} clients, empty backlog")
            empty[str(clients)] = measure(space, options, clients, 0, progress)
    slowdown = {
        key: round(empty[key]["submissions_per_s"] / max(entry["submissions_per_s"], 0.1), 2)
        for key, entry in sustained.items()
    }
    report: dict[str, Any] = {
        "store": options.store,
        "pending": options.pending,
        "duration_s": options.duration_s,
        "watch_s": options.watch_s or None,
        "sustained": sustained,
        "empty_backlog": empty,
        "slowdown": slowdown,
        "headline_clients": GOAL_CLIENTS
        if GOAL_CLIENTS in options.clients
        else max(options.clients),
        "goals": {
            "clients": GOAL_CLIENTS,
            "submissions_per_s": GOAL_SUBMISSIONS_PER_S,
            "p99_ms": GOAL_P99_MS,
            "slowdown": GOAL_SLOWDOWN,
        },
    }
    report["goals_met"] = goals_met(report)
    if hasattr(os, "getloadavg"):
        machine["load_average_after"] = round(os.getloadavg()[0], 2)
    report["machine"] = machine
    return report


def sustained_table(report: dict[str, Any]) -> Table:
    """Per client count: with the backlog and without, side by side."""
    pending = report["pending"]
    table = Table(
        title=f"kiban bench submit --sustained ({report['store']}, {pending:,} pending)",
        title_justify="left",
        header_style="bold",
    )
    for name in (
        "clients",
        "backlog /s",
        "backlog p99",
        "empty /s",
        "empty p99",
        "slowdown",
        "server CPU/sub (backlog, empty)",
        "errors",
    ):
        table.add_column(name, justify="right")
    for key, entry in report["sustained"].items():
        base = report["empty_backlog"][key]
        table.add_row(
            key,
            f"{entry['submissions_per_s']:,.1f}",
            f"{entry['p99_ms']:,.1f} ms",
            f"{base['submissions_per_s']:,.1f}",
            f"{base['p99_ms']:,.1f} ms",
            f"{report['slowdown'][key]:.2f}x",
            f"{entry['server_cpu_ms_per_submission']:.2f}, "
            f"{base['server_cpu_ms_per_submission']:.2f} ms",
            str(entry["errors"] + base["errors"]),
        )
    met = report["goals_met"]
    goals = report["goals"]

    def mark(key: str) -> str:
        return "met" if met[key] else "not met"

    table.caption = "\n".join(
        [
            f"goals with the backlog at {report['headline_clients']} clients: >= "
            f"{goals['submissions_per_s']:g}/s ({mark('submissions_per_s')}), p99 <= "
            f"{goals['p99_ms']:g} ms ({mark('p99_ms')}); at every count no more than "
            f"{goals['slowdown']:g}x slower than empty ({mark('slowdown')})",
            f"{report['duration_s']:g}s per client count, closed loop, every node cordoned; "
            f"each row two fresh servers"
            + (
                f"; GET /api/v1/queues every {report['watch_s']:g}s meanwhile, p99 (backlog, "
                f"empty): "
                + ", ".join(
                    f"{k} clients {report['sustained'][k]['queues_p99_ms']:,.0f}, "
                    f"{report['empty_backlog'][k]['queues_p99_ms']:,.0f} ms"
                    for k in report["sustained"]
                )
                if report.get("watch_s")
                else ""
            ),
            f"machine: {machine_line(report['machine'])}",
        ]
    )
    table.caption_justify = "left"
    return table
