"""``kiban bench api``: a burst of simultaneous requests from one member, against a fresh server.

Issue 21 found 80 simultaneous ``GET /whoami`` answered after 30 s or with 500, and 2,000
follows or lists leaving ``/healthz`` unanswered for ten minutes. This measures the same
shape of load:

1. a fresh ``kiban up`` (one node, one GPU) with a tenant, a member's token, 100 of the
   member's one-GPU jobs held pending behind a job that holds the GPU, so that
   ``GET /jobs?limit=100`` lists 100, and one job of the member's that prints a line twice a
   second, followed below;
2. idle: ``/healthz`` timed ``HEALTHZ_IDLE`` times, one after another: the floor;
3. the burst: ``burst`` requests opened at once from one process, each on a connection of its
   own, half ``GET /api/v1/jobs?limit=100``, half ``GET /api/v1/jobs/{id}/logs?follow=true``;
   each is timed from when it was opened to its whole answer (to its status line for a follow
   that streams, which is then closed). One with no answer ``give_up_s`` after the start is
   unanswered. Meanwhile ``/healthz`` is timed back to back from a process of its own (the
   burst's client loop would delay its reads), and the admin submits a job and times it until
   it runs: the control loop must go on scheduling.

Goals: every request answered 2xx or 503 within 5 s; ``/healthz`` p99 under 100 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

from rich.table import Table

from kiban.bench.loadgen import BenchError, HttpConnection, as_ms, prepare_request
from kiban.bench.machine import describe_machine, machine_line
from kiban.bench.servers import KibanServer, bench_workspace
from kiban.stats import percentile

TENANT = "bench"
QUEUE = "bench"
HELD_QUEUE = "bench-held"
HELD_JOBS = 100
HEALTHZ_IDLE = 200
GOAL_ANSWERED_WITHIN_S = 5.0
PROBER_START_S = 60.0  # a spawned interpreter importing this module, on a busy machine
PROBER_STOP_S = 10.0
PROBE_PAUSE_S = 0.01  # between probes: about a hundred a second
GOAL_HEALTHZ_P99_MS = 100.0

CLUSTER_FILE = f"""\
queues:
  - name: default
    tenant: default
  - name: {QUEUE}
    tenant: {TENANT}
  - name: {HELD_QUEUE}
    tenant: {TENANT}
"""

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ApiBenchOptions:
    burst: int = 1000
    give_up_s: float = 30.0
    startup_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.burst < 2:
            raise ValueError("burst must be at least 2 (half lists, half follows)")
        if self.give_up_s <= 0:
            raise ValueError("give-up must be positive")


def job_document(name: str, queue: str, command: list[str], gpu: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "queue": queue,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 1,
                    "resources": {"gpu": gpu, "cpu": 0.1, "memory": "64Mi"},
                    "command": command,
                }
            ],
        },
    }


TICKER = ["sh", "-c", "while true; do echo tick; sleep 0.5; done"]
HOLDER = ["sleep", "3600"]  # holds the one GPU: the held jobs wait for it
FINAL_STATES = ("Succeeded", "Failed", "Cancelled")


# -- one burst -------------------------------------------------------------------------------------
@dataclass
class BurstResult:
    """What a burst measured: each request's status (None: unanswered) and seconds."""

    answers: list[tuple[str, int | None, float]] = field(default_factory=list)
    healthz_s: list[float] = field(default_factory=list)
    scheduled_in_s: float | None = None

    def count(self, ok: Callable[[int | None], bool]) -> int:
        return sum(1 for _, status, _ in self.answers if ok(status))


async def request_once(
    url: str, request: bytes, kind: str, deadline: float
) -> tuple[int | None, float]:
    """Open a connection, send ``request``, read its answer (a follow's status line only).

    The status (None when none came before ``deadline``, loop time) and the seconds taken."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    parts = urlsplit(url)
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout_at(deadline):
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = None
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length is not None:
                await reader.readexactly(length)  # the whole answer (a list, a refusal)
            elif kind != "follow":
                await reader.read()  # chunked or closed: to its end
            return status, loop.time() - started
    except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
        return None, loop.time() - started
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()


async def time_healthz(url: str, count: int) -> list[float]:
    """``count`` ``/healthz`` one after another on one connection: seconds each."""
    conn = await HttpConnection.open(url)
    request = prepare_request("GET", url, "/healthz", "")
    loop = asyncio.get_running_loop()
    seconds = []
    try:
        for _ in range(count):
            before = loop.time()
            status, _ = await conn.send(request)
            if status != 200:
                raise BenchError(f"/healthz answered {status}")
            seconds.append(loop.time() - before)
    finally:
        await conn.close()
    return seconds


async def burst(
    url: str, member: str, admin: str, follow_job: str, count: int, give_up_s: float
) -> BurstResult:
    """The burst and what runs beside it (see the module's docstring)."""
    loop = asyncio.get_running_loop()
    result = BurstResult()
    lists = prepare_request("GET", url, "/api/v1/jobs?limit=100", member)
    follows = prepare_request("GET", url, f"/api/v1/jobs/{follow_job}/logs?follow=true", member)
    deadline = loop.time() + give_up_s

    async def schedule_one() -> None:
        conn = await HttpConnection.open(url)
        try:
            document = job_document("bench-during-burst", "default", ["true"])
            before = loop.time()
            status, body = await conn.send(
                prepare_request("POST", url, "/api/v1/jobs", admin, document)
            )
            if status != 201:
                return
            job_id = json.loads(body)["id"]
            get = prepare_request("GET", url, f"/api/v1/jobs/{job_id}", admin)
            while loop.time() < deadline:
                status, body = await conn.send(get)
                if status == 200 and json.loads(body).get("startedAt") is not None:
                    result.scheduled_in_s = loop.time() - before
                    return
                await asyncio.sleep(0.05)
        finally:
            await conn.close()

    async def one(kind: str, request: bytes) -> None:
        status, seconds = await request_once(url, request, kind, deadline)
        result.answers.append((kind, status, seconds))

    with HealthzProber(url, give_up_s) as prober:
        await prober.started()  # connected and timing before the burst begins
        scheduler = asyncio.create_task(schedule_one())
        kinds = [("list", lists) if i % 2 == 0 else ("follow", follows) for i in range(count)]
        await asyncio.gather(*(one(kind, request) for kind, request in kinds))
        result.healthz_s = await prober.timings()
    await scheduler
    return result


class HealthzProber:
    """``/healthz`` timed back to back from a process of its own: the burst's client, a
    thousand connections on one event loop, would otherwise delay the probe's own reads and
    count its lag as the server's."""

    def __init__(self, url: str, give_up_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._ready = context.Event()
        self._stop = context.Event()
        self._answers, sender = context.Pipe(duplex=False)
        self._process = context.Process(
            target=probe_healthz_process,
            args=(url, give_up_s, self._ready, self._stop, sender),
            name="kiban-bench-healthz",
            daemon=True,
        )
        self._process.start()
        sender.close()  # ours: the child's end closing is seen as the end of its answers

    def __enter__(self) -> HealthzProber:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._process.join(PROBER_STOP_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._answers.close()

    async def started(self) -> None:
        """Wait until the prober's connection is open and it is timing."""
        ready = await asyncio.to_thread(self._ready.wait, PROBER_START_S)
        if not ready:
            raise BenchError(f"the /healthz prober did not start within {PROBER_START_S:g} s")

    async def timings(self) -> list[float]:
        """Stop probing; the seconds each probe took."""
        self._stop.set()
        try:
            seconds: list[float] = await asyncio.to_thread(self._answers.recv)
        except EOFError:
            raise BenchError("the /healthz prober ended without its timings") from None
        return seconds


def probe_healthz_process(
    url: str, give_up_s: float, ready: Any, stop: Any, answers: Connection
) -> None:
    """The prober's process: ``/healthz`` back to back until ``stop`` or ``give_up_s``; the
    seconds each took are sent on ``answers``."""
    answers.send(asyncio.run(_probe_healthz(url, give_up_s, ready, stop)))
    answers.close()


async def _probe_healthz(url: str, give_up_s: float, ready: Any, stop: Any) -> list[float]:
    loop = asyncio.get_running_loop()
    conn = await HttpConnection.open(url)
    request = prepare_request("GET", url, "/healthz", "")
    deadline = loop.time() + give_up_s
    seconds: list[float] = []
    ready.set()
    try:
        while not stop.is_set():
            before = loop.time()
            try:
                async with asyncio.timeout_at(deadline):
                    await conn.send(request)
            except TimeoutError:
                seconds.append(loop.time() - before)
                break
            seconds.append(loop.time() - before)
            await asyncio.sleep(PROBE_PAUSE_S)
    finally:
        await conn.close()
    return seconds


# -- the whole benchmark ---------------------------------------------------------------------------
async def _setup(url: str, admin: str, say: Progress) -> tuple[str, list[str]]:
    """A tenant and its member's token, the member's held jobs; the member's token, and the
    ids of the followed job and the job that holds the GPU (both cancelled at the end)."""
    conn = await HttpConnection.open(url)
    try:

        async def call(
            method: str, path: str, token: str, body: dict[str, Any] | None = None
        ) -> Any:
            status, answer = await conn.send(prepare_request(method, url, path, token, body))
            if status >= 300:
                raise BenchError(f"{method} {path} answered {status}: {answer[:300]!r}")
            return json.loads(answer)

        async def running(document: dict[str, Any]) -> str:
            job_id: str = (await call("POST", "/api/v1/jobs", member, document))["id"]
            give_up = time.monotonic() + 60
            while (job := await call("GET", f"/api/v1/jobs/{job_id}", member))["state"] != (
                "Running"
            ):
                if time.monotonic() > give_up or job["state"] in FINAL_STATES:
                    raise BenchError(
                        f"job {job_id} did not start within 60 s: {job['state']}, "
                        f"{job.get('message')}"
                    )
                await asyncio.sleep(0.1)
            return job_id

        # the cluster file's queues made the tenant
        member = (
            await call("POST", f"/api/v1/tenants/{TENANT}/tokens", admin, {"name": "member"})
        )["token"]
        say(f"one job that prints a line twice a second, and {HELD_JOBS} held jobs of the member's")
        followed = await running(job_document("ticker", QUEUE, TICKER))
        holder = await running(job_document("bench-holder", HELD_QUEUE, HOLDER, gpu=1))
        held = job_document("bench-held", HELD_QUEUE, ["true"], gpu=1)
        for _ in range(HELD_JOBS):
            await call("POST", "/api/v1/jobs", member, held)
        return member, [followed, holder]
    finally:
        await conn.close()


async def _cancel(url: str, token: str, job_id: str) -> None:
    with contextlib.suppress(BenchError, OSError):
        conn = await HttpConnection.open(url)
        try:
            await conn.send(prepare_request("POST", url, f"/api/v1/jobs/{job_id}/cancel", token))
        finally:
            await conn.close()


def run_api_bench(options: ApiBenchOptions, say: Progress | None = None) -> dict[str, Any]:
    """Run the benchmark on a fresh server and return the JSON-ready report."""
    progress: Progress = say or (lambda _: None)
    machine = describe_machine()
    with (
        bench_workspace("kiban-bench-api-") as root,
        KibanServer(root / "home", None, options.startup_timeout_s, CLUSTER_FILE) as server,
    ):
        member, started = asyncio.run(_setup(server.url, server.token, progress))
        job_id = started[0]
        try:
            progress(f"idle: /healthz {HEALTHZ_IDLE} times")
            idle = asyncio.run(time_healthz(server.url, HEALTHZ_IDLE))
            progress(f"burst: {options.burst} requests at once (half lists, half follows)")
            result = asyncio.run(
                burst(server.url, member, server.token, job_id, options.burst, options.give_up_s)
            )
        except BenchError as exc:
            raise BenchError(f"{exc}; the server's log ends:\n{server.log}") from exc
        finally:
            for started_id in started:
                asyncio.run(_cancel(server.url, server.token, started_id))
    report = summarize(result, idle, options)
    if hasattr(os, "getloadavg"):
        machine["load_average_after"] = round(os.getloadavg()[0], 2)
    report["machine"] = machine
    return report


def summarize(result: BurstResult, idle: list[float], options: ApiBenchOptions) -> dict[str, Any]:
    seconds = [s if status is not None else options.give_up_s for _, status, s in result.answers]
    healthz_p99 = as_ms(percentile(result.healthz_s, 99))
    idle_p99 = as_ms(percentile(idle, 99))
    answered = [s for _, status, s in result.answers if status is not None]
    report: dict[str, Any] = {
        "requests": len(result.answers),
        "answered_2xx": result.count(lambda s: s is not None and 200 <= s < 300),
        "answered_503": result.count(lambda s: s == 503),
        "answered_other": result.count(
            lambda s: s is not None and not (200 <= s < 300) and s != 503
        ),
        "unanswered": result.count(lambda s: s is None),
        "p50_s": round(percentile(seconds, 50), 3),
        "p99_s": round(percentile(seconds, 99), 3),
        "max_s": round(max(seconds, default=0.0), 3),
        "healthz_p99_ms": healthz_p99,
        "healthz_max_ms": as_ms(max(result.healthz_s, default=0.0)),
        "healthz_probes": len(result.healthz_s),
        "healthz_idle_p99_ms": idle_p99,
        "healthz_slowdown": round(healthz_p99 / idle_p99, 1) if idle_p99 > 0 else None,
        "scheduled_in_s": None
        if result.scheduled_in_s is None
        else round(result.scheduled_in_s, 3),
        "by_kind": {
            kind: {
                "2xx": sum(
                    1 for k, s, _ in result.answers if k == kind and s is not None and s < 300
                ),
                "503": sum(1 for k, s, _ in result.answers if k == kind and s == 503),
                "p99_s": round(percentile([s for k, _, s in result.answers if k == kind], 99), 3),
            }
            for kind in ("list", "follow")
        },
        "answered_max_s": round(max(answered, default=0.0), 3),
    }
    report["goals"] = {
        "answered_within_s": GOAL_ANSWERED_WITHIN_S,
        "healthz_p99_ms": GOAL_HEALTHZ_P99_MS,
    }
    report["goals_met"] = {
        "answered_within_s": report["unanswered"] == 0
        and report["answered_other"] == 0
        and report["max_s"] <= GOAL_ANSWERED_WITHIN_S,
        "healthz_p99_ms": healthz_p99 <= GOAL_HEALTHZ_P99_MS,
    }
    report["settings"] = {"burst": options.burst, "give_up_s": options.give_up_s}
    return report


def api_table(report: dict[str, Any]) -> Table:
    """The report as a table, against the goals."""
    table = Table(title="kiban bench api", title_justify="left", header_style="bold")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("goal", justify="right")
    table.add_column("what it means", style="dim", overflow="fold")
    met = report["goals_met"]

    def mark(ok: bool) -> str:
        return " [green]✓[/green]" if ok else " [red]✗[/red]"

    burst_size = report["settings"]["burst"]
    rows = [
        (
            "requests",
            f"{report['requests']:,}",
            "",
            f"opened at once by one member: {burst_size - burst_size // 2} lists of 100 jobs, "
            f"{burst_size // 2} log follows",
        ),
        (
            "answered 2xx",
            f"{report['answered_2xx']:,}",
            "",
            "lists answered whole, follows streaming",
        ),
        (
            "answered 503",
            f"{report['answered_503']:,}",
            "",
            "refused with Retry-After: past the member's or the API's limits",
        ),
        (
            "other or unanswered",
            f"{report['answered_other'] + report['unanswered']:,}",
            "0" + mark(met["answered_within_s"]),
            f"another status, or no answer within {report['settings']['give_up_s']:g} s",
        ),
        (
            "p99 to an answer",
            f"{report['p99_s']:.3f} s",
            "",
            "from opening the connection to the whole answer (a follow: its status line)",
        ),
        (
            "slowest answer",
            f"{report['max_s']:.3f} s",
            f"<= {GOAL_ANSWERED_WITHIN_S:g} s" + mark(met["answered_within_s"]),
            "",
        ),
        (
            "/healthz p99 meanwhile",
            f"{report['healthz_p99_ms']:.1f} ms",
            f"< {GOAL_HEALTHZ_P99_MS:g} ms" + mark(met["healthz_p99_ms"]),
            f"{report['healthz_probes']} probes back to back during the burst",
        ),
        (
            "/healthz p99 idle",
            f"{report['healthz_idle_p99_ms']:.1f} ms",
            "",
            f"the floor: slowed {report['healthz_slowdown']}x by the burst",
        ),
        (
            "a job scheduled meanwhile",
            "-" if report["scheduled_in_s"] is None else f"{report['scheduled_in_s']:.2f} s",
            "",
            "the admin's submission until it runs: the control loop goes on",
        ),
    ]
    for row in rows:
        table.add_row(*row)
    table.caption = machine_line(report["machine"])
    return table


__all__ = ["ApiBenchOptions", "BenchError", "api_table", "burst", "run_api_bench"]
