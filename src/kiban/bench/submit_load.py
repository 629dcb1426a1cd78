"""The load ``kiban bench submit`` puts on a kiban server: the jobs it submits, its phases'
clients (submit to running, open loop at an offered rate, closed loop at saturation) and the few
calls they make on the server (cordon a node, count a queue's jobs, verify the audit log).

The load generator speaks HTTP/1.1 over asyncio streams with prepared request bytes, from one
process: client and server share the machine's cores, and with 32 connections httpx's
AsyncClient spent 3.5 to 4.4 ms of CPU per submission where this client spends about 0.07 ms
(measured side by side on a 2-core machine), so httpx would have taken the server's CPU.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from kiban.bench.loadgen import BenchError, HttpConnection, prepare_request

HELD_QUEUE = "bench-held"
"""The queue of one GPU whose one node the load phases cordon: its jobs are stored, never run."""


def held_job() -> dict[str, Any]:
    """A one-GPU job for the held queue, whose one node is cordoned: stored and queued, never
    started."""
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "bench-held"},
        "spec": {
            "queue": HELD_QUEUE,
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


def quick_job() -> dict[str, Any]:
    """A job that starts at once on an idle server and exits at once: ``true``, no GPUs."""
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "bench-run"},
        "spec": {
            "queue": "default",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 1,
                    "resources": {"gpu": 0, "cpu": 0.1, "memory": "64Mi"},
                    "command": ["true"],
                }
            ],
        },
    }


# -- phases ----------------------------------------------------------------------------------
@dataclass
class LoadResult:
    """What one load phase measured. Latencies are of the submissions answered 201."""

    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    unsent: int = 0
    elapsed_s: float = 0.0
    warmup: int = 0
    first_error: str = ""

    @property
    def submitted(self) -> int:
        return len(self.latencies_s)

    @property
    def rate(self) -> float:
        return self.submitted / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def fail(self, status: int, body: bytes) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = f"HTTP {status}: {body[:300].decode(errors='replace')}"


async def _open_connections(url: str, clients: int, request: bytes) -> list[HttpConnection]:
    """Open ``clients`` connections and send one warm-up submission on each, all at once (one
    after another, the last connection sat idle for the others' answers, and the server closes
    a connection that sends nothing for 10 s: ``kiban.api.http_protocol``)."""
    connections = [await HttpConnection.open(url) for _ in range(clients)]
    try:
        answers = await asyncio.gather(*(conn.send(request) for conn in connections))
        for status, body in answers:
            if status != 201:
                raise BenchError(f"warm-up submission failed with HTTP {status}: {body[:300]!r}")
    except BaseException:
        for conn in connections:
            await conn.close()
        raise
    return connections


async def open_loop(
    url: str, token: str, *, clients: int, rate: float, count: int, give_up_s: float
) -> LoadResult:
    """``count`` submissions due at ``rate`` per second, spread over ``clients`` connections.

    A latency runs from when the submission was due. Submissions still unsent ``give_up_s``
    after the start (the server fell far behind) are not sent; they are counted in ``unsent``
    and enter the percentiles with the time they had waited by then, a lower bound.
    """
    request = prepare_request("POST", url, "/api/v1/jobs", token, held_job())
    connections = await _open_connections(url, clients, request)
    result = LoadResult(warmup=clients)
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    give_up = start + give_up_s

    async def worker(k: int, conn: HttpConnection) -> None:
        for i in range(k, count, clients):
            due = start + i / rate
            now = loop.time()
            if now > give_up:
                result.unsent += 1
                result.latencies_s.append(now - due)
                continue
            if due > now:
                await asyncio.sleep(due - now)
            status, body = await conn.send(request)
            if status == 201:
                result.latencies_s.append(loop.time() - due)
            else:
                result.fail(status, body)

    try:
        await asyncio.gather(*(worker(k, c) for k, c in enumerate(connections)))
        result.elapsed_s = loop.time() - start
    finally:
        for conn in connections:
            await conn.close()
    return result


async def closed_loop(
    url: str,
    token: str,
    *,
    clients: int,
    count: int | None,
    duration_s: float,
    document: dict[str, Any] | None = None,
) -> LoadResult:
    """``clients`` connections submitting back to back, ``count`` jobs or for ``duration_s``;
    each submits ``document`` (default ``held_job``)."""
    request = prepare_request("POST", url, "/api/v1/jobs", token, document or held_job())
    connections = await _open_connections(url, clients, request)
    result = LoadResult(warmup=clients)
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + duration_s
    issued = 0
    last_done = start

    def more() -> bool:
        return issued < count if count is not None else loop.time() < deadline

    async def worker(conn: HttpConnection) -> None:
        nonlocal issued, last_done
        while more():
            issued += 1
            sent = loop.time()
            status, body = await conn.send(request)
            last_done = loop.time()
            if status == 201:
                result.latencies_s.append(last_done - sent)
            else:
                result.fail(status, body)

    try:
        await asyncio.gather(*(worker(c) for c in connections))
        result.elapsed_s = last_done - start
    finally:
        for conn in connections:
            await conn.close()
    return result


async def submit_to_running(url: str, token: str, count: int) -> list[float]:
    """Latencies (s) from just before each POST to its replica's ``startedAt``, one at a time.

    Each job runs ``true``; the next is submitted once the previous one has succeeded, so every
    job meets an idle server.
    """
    conn = await HttpConnection.open(url)
    post = prepare_request("POST", url, "/api/v1/jobs", token, quick_job())
    latencies: list[float] = []
    try:
        for _ in range(count):
            before = time.time()
            status, body = await conn.send(post)
            if status != 201:
                raise BenchError(f"submission failed with HTTP {status}: {body[:300]!r}")
            job_id = json.loads(body)["id"]
            get = prepare_request("GET", url, f"/api/v1/jobs/{job_id}", token)
            started: float | None = None
            give_up = time.monotonic() + 60
            while True:
                status, body = await conn.send(get)
                if status != 200:
                    raise BenchError(f"GET job {job_id} failed with HTTP {status}: {body[:300]!r}")
                job = json.loads(body)
                replicas = job.get("replicas") or []
                if started is None and replicas and replicas[0].get("startedAt") is not None:
                    started = float(replicas[0]["startedAt"])
                    latencies.append(started - before)
                if job["state"] in ("Succeeded", "Failed", "Cancelled"):
                    if started is None or job["state"] != "Succeeded":
                        raise BenchError(f"job {job_id} ended {job['state']}: {job['message']}")
                    break
                if time.monotonic() > give_up:
                    raise BenchError(f"job {job_id} did not finish within 60s ({job['state']})")
                await asyncio.sleep(0.05)  # startedAt is the server's: slow polling loads it less
    finally:
        await conn.close()
    return latencies


async def cordon(url: str, token: str, node: str) -> None:
    """Cordon a node (``POST /api/v1/nodes/NODE/cordon``): it takes no new work."""
    conn = await HttpConnection.open(url)
    try:
        path = f"/api/v1/nodes/{node}/cordon"
        status, body = await conn.send(prepare_request("POST", url, path, token))
    finally:
        await conn.close()
    if status != 200:
        raise BenchError(f"POST {path} failed with HTTP {status}: {body[:300]!r}")


async def jobs_in_queue(url: str, token: str, queue: str) -> int:
    """Jobs of ``queue`` in the store, pending or running, from ``GET /api/v1/queues``."""
    conn = await HttpConnection.open(url)
    try:
        status, body = await conn.send(prepare_request("GET", url, "/api/v1/queues", token))
    finally:
        await conn.close()
    if status != 200:
        raise BenchError(f"GET /api/v1/queues failed with HTTP {status}: {body[:300]!r}")
    for row in json.loads(body):
        if row["name"] == queue:
            return int(row["pending"]) + int(row["running"])
    raise BenchError(f"queue {queue} not found")


async def audit_verdict(url: str, token: str) -> dict[str, Any]:
    """The server's audit log walked (``GET /api/v1/audit/verify``): intact, how many records."""
    conn = await HttpConnection.open(url)
    try:
        path = "/api/v1/audit/verify"
        status, body = await conn.send(prepare_request("GET", url, path, token))
    finally:
        await conn.close()
    if status != 200:
        raise BenchError(f"GET {path} failed with HTTP {status}: {body[:300]!r}")
    verdict: dict[str, Any] = json.loads(body)
    return verdict
