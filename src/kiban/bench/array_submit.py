"""``kiban bench submit --array N``: an array of N indices against the same N jobs submitted
one by one, side by side in one run, on fresh ``kiban up`` servers (one per store and way).

For each store, two measures each way:

1. **accepted**: from the first POST to the last answer. The array is one POST (its N indices
   written in one transaction); the single jobs are N POSTs from ``clients`` keep-alive
   connections back to back (the load generator of ``kiban bench submit``; its warm-up
   submissions count among the N).
2. **first K scheduled**: the server's one node is cordoned while the jobs are submitted (so
   that launching them does not compete with taking them: a server busy launching hundreds
   of processes answers too slowly, and closes connections); once all are stored it is
   uncordoned, and this measure runs from then until K of the jobs have left Pending
   (admitted by the scheduler and launched by the local executor), polled every 50 ms: for
   the array through ``GET /api/v1/arrays/ID`` (its counts by state), for the single jobs
   through ``GET /api/v1/jobs`` (``X-Total-Count`` of those not pending).

The jobs run ``true`` with no GPU, 5 millicores and 16 MiB, so one virtual node (8 CPUs,
32 GiB) holds more than K = 1,000 of them at once: what limits how soon they start is kiban,
not capacity.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from kiban.bench.loadgen import BenchError, HttpConnection, prepare_request
from kiban.bench.machine import describe_machine
from kiban.bench.servers import KibanServer, bench_workspace
from kiban.bench.submit import HELD_NODE, STORES, postgres_missing
from kiban.bench.submit_load import closed_loop, cordon
from kiban.devtools.postgres import PostgresUnavailable, ThrowawayPostgres

CLUSTER_FILE = """\
queues:
  - name: default
    tenant: default
"""
NOT_PENDING = ("Admitted", "Running", "Stopping", "Succeeded", "Failed")
POLL_S = 0.05

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ArrayBenchOptions:
    """An array of ``size`` indices; ``scheduled`` of them to wait for; ``clients``
    connections for the single jobs."""

    size: int = 10_000
    scheduled: int = 1_000
    clients: int = 32
    stores: tuple[str, ...] = ("sqlite",)
    timeout_s: float = 900.0  # each wait: the single submissions, the first scheduled
    startup_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("--array must be at least 1")
        if not 1 <= self.scheduled <= self.size:
            raise ValueError(f"--scheduled must be between 1 and --array ({self.size})")
        if not 1 <= self.clients <= self.size:
            raise ValueError(f"--clients must be between 1 and --array ({self.size})")
        unknown = sorted(set(self.stores) - set(STORES))
        if unknown or not self.stores:
            raise ValueError(f"stores must be among {', '.join(STORES)}; got {self.stores}")


def bench_job(array: str | None = None) -> dict[str, Any]:
    """The job each way submits: ``true``, no GPU, tiny; with ``array``, as its indices."""
    spec: dict[str, Any] = {
        "queue": "default",
        "tasks": [
            {
                "name": "worker",
                "replicas": 1,
                "resources": {"gpu": 0, "cpu": "5m", "memory": "16Mi"},
                "command": ["true"],
            }
        ],
    }
    if array is not None:
        spec["array"] = {"indices": array}
    return {"apiVersion": "kiban/v1", "kind": "Job", "metadata": {"name": "bench"}, "spec": spec}


async def _submit_array(url: str, token: str, size: int) -> str:
    conn = await HttpConnection.open(url)
    try:
        request = prepare_request("POST", url, "/api/v1/jobs", token, bench_job(f"0-{size - 1}"))
        status, body = await conn.send(request)
    finally:
        await conn.close()
    if status != 201:
        raise BenchError(f"the array was refused with HTTP {status}: {body[:300]!r}")
    return str(json.loads(body)["id"])


def _wait_scheduled(count: Callable[[], int], wanted: int, since: float, timeout_s: float) -> float:
    """Seconds from ``since`` until ``count()`` reaches ``wanted`` (polled)."""
    deadline = time.monotonic() + timeout_s
    while count() < wanted:
        if time.monotonic() > deadline:
            raise BenchError(f"fewer than {wanted} jobs scheduled within {timeout_s:g}s")
        time.sleep(POLL_S)
    return time.perf_counter() - since


def _uncordon(api: httpx.Client) -> float:
    """Let the node take work again; the time it did (``perf_counter``)."""
    api.post(f"/api/v1/nodes/{HELD_NODE}/uncordon").raise_for_status()
    return time.perf_counter()


def _array_way(server: KibanServer, options: ArrayBenchOptions) -> dict[str, float]:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=30
    ) as api:
        asyncio.run(cordon(server.url, server.token, HELD_NODE))
        start = time.perf_counter()
        array_id = asyncio.run(_submit_array(server.url, server.token, options.size))
        accepted = time.perf_counter() - start
        start = _uncordon(api)

        def scheduled() -> int:
            counts = api.get(f"/api/v1/arrays/{array_id}").raise_for_status().json()["counts"]
            return sum(n for state, n in counts.items() if state in NOT_PENDING)

        first = _wait_scheduled(scheduled, options.scheduled, start, options.timeout_s)
    return {"accept_s": round(accepted, 3), "first_scheduled_s": round(first, 3)}


def _single_way(server: KibanServer, options: ArrayBenchOptions) -> dict[str, float]:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=30
    ) as api:
        params: list[tuple[str, str | int | float | bool | None]] = [("limit", 1)]
        params += [("state", s) for s in NOT_PENDING]

        def scheduled() -> int:
            return int(api.get("/api/v1/jobs", params=params).headers["X-Total-Count"])

        asyncio.run(cordon(server.url, server.token, HELD_NODE))
        start = time.perf_counter()
        result = asyncio.run(
            closed_loop(
                server.url,
                server.token,
                clients=options.clients,
                count=options.size - options.clients,  # each connection's warm-up is one
                duration_s=options.timeout_s,
                document=bench_job(),
            )
        )
        accepted = time.perf_counter() - start
        if result.errors:
            raise BenchError(f"{result.errors} single submissions failed: {result.first_error}")
        start = _uncordon(api)
        first = _wait_scheduled(scheduled, options.scheduled, start, options.timeout_s)
    return {
        "accept_s": round(accepted, 3),
        "first_scheduled_s": round(first, 3),
        "submissions_per_s": round(options.size / accepted, 1),
    }


@contextlib.contextmanager
def _servers(options: ArrayBenchOptions) -> Iterator[Callable[[str, str], KibanServer]]:
    with bench_workspace("kiban-bench-array-") as root, contextlib.ExitStack() as stack:
        postgres: list[ThrowawayPostgres] = []

        def server(store: str, way: str) -> KibanServer:
            db_url = None
            if store == "postgresql":
                if not postgres:
                    postgres.append(stack.enter_context(ThrowawayPostgres()))
                db_url = postgres[0].create_database(f"bench_array_{way}")
            home = Path(root) / f"{store}-{way}"
            return KibanServer(home, db_url, options.startup_timeout_s, CLUSTER_FILE)

        yield server


def run_array_bench(options: ArrayBenchOptions, say: Progress | None = None) -> dict[str, Any]:
    """Both ways on each store; the JSON-ready report (a store that cannot run: skipped)."""
    progress: Progress = say or (lambda _: None)
    report: dict[str, Any] = {}
    with _servers(options) as server:
        for store in options.stores:
            missing = postgres_missing() if store == "postgresql" else None
            if missing is not None:
                report[store] = {"skipped": missing}
                continue
            try:
                progress(f"{store}: one array of {options.size} indices")
                with server(store, "array") as running:
                    array = _array_way(running, options)
                progress(f"{store}: {options.size} single jobs over {options.clients} clients")
                with server(store, "single") as running:
                    single = _single_way(running, options)
            except PostgresUnavailable as exc:
                report[store] = {"skipped": str(exc)}
                continue
            report[store] = {
                "array": array,
                "single": single,
                "accept_speedup": round(single["accept_s"] / max(array["accept_s"], 1e-9), 1),
                "first_scheduled_speedup": round(
                    single["first_scheduled_s"] / max(array["first_scheduled_s"], 1e-9), 2
                ),
            }
    report["settings"] = {
        "array": options.size,
        "scheduled": options.scheduled,
        "clients": options.clients,
    }
    machine = describe_machine()
    if hasattr(os, "getloadavg"):
        machine["load_average_after"] = round(os.getloadavg()[0], 2)
    report["machine"] = machine
    return report


def array_table(report: dict[str, Any]) -> Any:
    """The report as a table: each store's two ways side by side, and their ratio."""
    from rich.table import Table

    settings = report["settings"]
    size, wanted = settings["array"], settings["scheduled"]
    table = Table(
        title=f"kiban bench submit --array {size}", title_justify="left", header_style="bold"
    )
    for column in ("store", "measure", "array", "single jobs", "single / array"):
        table.add_column(column, justify="left" if column in ("store", "measure") else "right")
    for store in STORES:
        entry = report.get(store)
        if entry is None:
            continue
        if "skipped" in entry:
            table.add_row(store, f"skipped: {entry['skipped']}", "", "", "")
            continue
        array, single = entry["array"], entry["single"]
        table.add_row(
            store,
            f"accept {size} jobs",
            f"{array['accept_s']:.3f} s",
            f"{single['accept_s']:.3f} s ({settings['clients']} clients)",
            f"{entry['accept_speedup']:g}x",
        )
        table.add_row(
            "",
            f"first {wanted} scheduled",
            f"{array['first_scheduled_s']:.3f} s",
            f"{single['first_scheduled_s']:.3f} s",
            f"{entry['first_scheduled_speedup']:g}x",
        )
    machine = report["machine"]
    table.caption = (
        f"{machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores; accepted: from "
        "the first POST to the last answer; scheduled: from the node's uncordon until that "
        "many left Pending (admitted and launched)"
    )
    return table
