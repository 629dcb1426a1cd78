"""``kiban bench health``'s intake: how many node health reports a real control plane takes per
second, each node's report POSTed on its own and the same nodes' reports in batches
(``POST /api/v1/nodes/health``), side by side on one server.

The server is ``kiban up`` in a subprocess (uvicorn, the store on SQLite, its control loop
running, ``--no-node-agent``: the reports are the bench's), reached over HTTP with keep-alive,
not the in-process test client: profiled, the test client's thread hops cost more per report
than the control plane's own work, so its figure said little about a real server. The reports
are like the nodes' last ones (a warm-up round first), as they are in a healthy cluster; their
JSON is made before the clock starts (that is the agents' work). The server's CPU per report
is its process's CPU time over the round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from kiban.bench.loadgen import BenchError
from kiban.bench.servers import KibanServer, bench_workspace
from kiban.health.report import NodeHealthBatch, NodeHealthReport
from kiban.health.reporting import BATCH_PATH
from kiban.testing.health_reports import health_report

CLUSTER_FILE = "queues:\n  - name: default\n    tenant: default\n"
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True, slots=True)
class Intake:
    """One round: every node's report taken once."""

    reports: int
    wall_s: float
    server_cpu_s: float

    @property
    def per_s(self) -> float:
        return self.reports / self.wall_s


def measure_intake(
    nodes: int,
    interval_s: float,
    batch_size: int,
    gpus_per_node: int,
    *,
    startup_timeout_s: float = 180.0,
) -> dict[str, Any]:
    """Start ``kiban up`` with ``nodes`` virtual nodes; one warm-up round in batches, then a
    round of per-node POSTs and a round of batches of ``batch_size``; their rates and CPU."""
    with bench_workspace("kiban-bench-intake-") as root:
        extra = ("--nodes", str(nodes), "--gpus-per-node", str(gpus_per_node), "--no-node-agent")
        server = KibanServer(root / "home", None, startup_timeout_s, CLUSTER_FILE, extra)
        with server:
            headers = {"Authorization": f"Bearer {server.token}"}
            with httpx.Client(base_url=server.url, headers=headers, timeout=60.0) as client:
                listed = client.get("/api/v1/nodes")
                names = [node["name"] for node in listed.json()]
                if len(names) != nodes:
                    raise BenchError(f"kiban up has {len(names)} nodes, not {nodes}")
                batches = _in_batches(batch_size)
                _round(server, client, names, interval_s, batches)  # warm-up: first reports
                per_node = _round(server, client, names, interval_s, _one_by_one)
                batched = _round(server, client, names, interval_s, batches)
    return {
        "ingest_reports_per_s": round(per_node.per_s, 1),
        "ingest_batched_reports_per_s": round(batched.per_s, 1),
        "ingest_batch_size": batch_size,
        "ingest_batched_speedup": round(batched.per_s / per_node.per_s, 2),
        "ingest_server_cpu_ms_per_report": round(per_node.server_cpu_s / nodes * 1e3, 3),
        "ingest_batched_server_cpu_ms_per_report": round(batched.server_cpu_s / nodes * 1e3, 3),
    }


Posts = Callable[[Sequence[NodeHealthReport]], list[tuple[str, str]]]


def _round(
    server: KibanServer,
    client: httpx.Client,
    names: Sequence[str],
    interval_s: float,
    posts: Posts,
) -> Intake:
    """Every node's report once, as ``posts`` makes the requests of them (path, body)."""
    now = time.time()
    requests = posts([health_report(name, now, interval_s=interval_s) for name in names])
    cpu = server.cpu_seconds()
    began = time.perf_counter()
    for path, body in requests:
        answer = client.post(path, content=body, headers=JSON)
        if answer.status_code != 200:
            raise BenchError(f"reports were refused: HTTP {answer.status_code} {answer.text}")
    wall = time.perf_counter() - began
    return Intake(len(names), wall, server.cpu_seconds() - cpu)


def _one_by_one(reports: Sequence[NodeHealthReport]) -> list[tuple[str, str]]:
    return [(f"/api/v1/nodes/{r.reading.node}/health", r.model_dump_json()) for r in reports]


def _in_batches(size: int) -> Posts:
    def posts(reports: Sequence[NodeHealthReport]) -> list[tuple[str, str]]:
        return [
            (BATCH_PATH, NodeHealthBatch(reports=list(reports[i : i + size])).model_dump_json())
            for i in range(0, len(reports), size)
        ]

    return posts
