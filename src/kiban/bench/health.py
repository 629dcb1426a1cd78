"""``kiban bench health``: from a GPU fault in a reading to its node cordoned and its jobs
requeued, on many virtual nodes; with the control plane's ``/metrics`` render and the node
agent's CPU per check.

What runs: an in-process control plane (the store on SQLite, the fake executor's nodes, a
manual clock) with the real API, ingest, remediation and control loop. Every node's agent
reports every ``interval`` seconds of simulated time, the nodes' phases spread evenly over the
interval; the cluster is full of 2-node jobs. Faults appear on random nodes at random times.

A fault's time to requeue is its wait for the node's next check (simulated time: the agent
only sees it then) plus the wall time the control plane takes from that report to the node
cordoned and every job on it stopping to requeue (the report's POST, then the control loop's
pass that the drain wakes). The wall time every report takes through the test client is kept
(``ingest_test_client_reports_per_s``), but whether the control plane keeps up is measured
against a real server (``kiban.bench.health_intake``: ``kiban up`` over HTTP), per-node POSTs and
batches side by side: it keeps up when it ingests faster than the nodes report
(``ingest_reports_per_s``, ``ingest_batched_reports_per_s`` against ``reports_needed_per_s``);
where it does not, the figures above would grow with the backlog.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiban.bench.health_agent import measure_agent_cpu
from kiban.bench.health_intake import measure_intake
from kiban.bench.machine import describe_machine
from kiban.bench.metrics_render import measure_metrics_render
from kiban.health.report import MAX_BATCH_REPORTS
from kiban.stats import percentile

GOAL_FAULT_TO_REQUEUE_P99_S = 10.0
GOAL_METRICS_RENDER_S = 1.0
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class HealthBenchOptions:
    """``nodes`` virtual nodes reporting every ``interval_s``; ``faults`` of them fail within
    ``intervals`` intervals of simulated time; the intake's batches carry ``batch_size``
    reports (an agent serving that many nodes)."""

    nodes: int = 1024
    interval_s: float = 5.0
    faults: int = 32
    intervals: int = 4
    seed: int = 0
    metrics_nodes: int = 16_384
    batch_size: int = MAX_BATCH_REPORTS

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ValueError(f"--nodes must be at least 2; got {self.nodes}")
        if not 0 < self.interval_s <= 600:
            raise ValueError(f"--interval must be above 0 and at most 600 s; got {self.interval_s}")
        if not 1 <= self.faults <= self.nodes // 2:
            raise ValueError(f"--faults must be 1 to half of --nodes; got {self.faults}")
        if self.intervals < 3:
            raise ValueError(f"--intervals must be at least 3; got {self.intervals}")
        if not 2 <= self.batch_size <= MAX_BATCH_REPORTS:
            raise ValueError(f"batch_size must be 2 to {MAX_BATCH_REPORTS}; got {self.batch_size}")


def measure_fault_to_requeue(options: HealthBenchOptions) -> dict[str, Any]:
    """Run the simulation above; the seconds from fault to requeue, and the ingest rate."""
    from fastapi.testclient import TestClient
    from sqlalchemy import select

    from kiban.api.app import create_app
    from kiban.executors.base import NodeInfo
    from kiban.health.conditions import CheckType
    from kiban.platform import build_platform
    from kiban.services import jobs
    from kiban.services.auth import Principal
    from kiban.services.policy import apply_policy
    from kiban.store.models import Job, Replica
    from kiban.store.models_nodes import Node
    from kiban.testing import FakeExecutor, ManualClock
    from kiban.testing.health_reports import health_report

    rng = random.Random(options.seed)
    admin = Principal(name="admin", tenant=None, is_admin=True)
    names = [f"node-{i:05d}" for i in range(options.nodes)]
    nodes = [
        NodeInfo(n, GPUS_PER_NODE, 64_000, 512 * 2**30, {"kubernetes.io/hostname": n})
        for n in names
    ]
    clock = ManualClock()
    with tempfile.TemporaryDirectory(prefix="kiban-bench-health-") as home:
        executor = FakeExecutor(nodes, clock=clock)
        platform = build_platform(home=Path(home), db_url=None, executor=executor, clock=clock)
        try:
            with platform.sessions() as session:
                breaker = {"maxNodes": options.faults, "maxPercent": 100}
                document = {"health": {"circuitBreaker": breaker}}
                apply_policy(session, document, "bench", clock.now())
                session.commit()
            platform.refresh_policy()
            job = {
                "apiVersion": "kiban/v1",
                "kind": "Job",
                "metadata": {"name": "train"},
                "spec": {
                    "tasks": [
                        {
                            "name": "worker",
                            "replicas": 2,
                            "command": ["python", "train.py"],
                            "resources": {"gpu": GPUS_PER_NODE},
                        }
                    ]
                },
            }
            with platform.sessions() as session:
                for _ in range(options.nodes // 2):
                    jobs.submit(session, admin, job, facts=platform.facts, at=clock.now())
                session.commit()
            for _ in range(100):
                platform.loop.run_once()
                with platform.sessions() as session:
                    pending = session.scalars(select(Job.id).where(Job.state != "Running")).all()
                if not pending:
                    break
            else:
                raise RuntimeError("the jobs filling the cluster did not all come to run")

            token = (platform.home / "token").read_text().strip()
            start = clock.now()
            interval = options.interval_s
            faulty = rng.sample(names, options.faults)
            fault_at = {
                n: start + interval + rng.uniform(0, (options.intervals - 2) * interval)
                for n in faulty
            }
            reports = sorted(
                (start + k * interval + i * interval / options.nodes, n)
                for k in range(options.intervals)
                for i, n in enumerate(names)
            )
            fault = {CheckType.GPU_ECC: "GPU 0: 1 volatile uncorrectable ECC error"}
            latencies: list[float] = []
            waits: list[float] = []
            handling: list[float] = []
            report_wall = 0.0
            seen: set[str] = set()
            with TestClient(
                create_app(platform), headers={"Authorization": f"Bearer {token}"}
            ) as api:
                for at, name in reports:
                    clock.advance(max(0.0, at - clock.now()))
                    broken = name in fault_at and at >= fault_at[name]
                    body = health_report(
                        name, at, fault if broken else None, interval_s=interval
                    ).model_dump(mode="json")
                    began = time.perf_counter()
                    response = api.post(f"/api/v1/nodes/{name}/health", json=body)
                    if response.status_code != 200:
                        raise RuntimeError(f"a report was refused: {response.text}")
                    report_wall += time.perf_counter() - began
                    if not broken or name in seen:
                        continue
                    seen.add(name)
                    for _ in range(20):  # the pass the drain woke (a few if it must retry)
                        with platform.sessions() as session:
                            row = session.get_one(Node, name)
                            running = session.scalars(
                                select(Job.id)
                                .join(Replica, Replica.job_id == Job.id)
                                .where(
                                    Replica.node == name,
                                    Replica.active.is_(True),
                                    Job.state == "Running",
                                )
                            ).all()
                        if row.cordoned and not running:
                            break
                        platform.loop.run_once()
                    else:
                        raise RuntimeError(f"node {name} was not drained")
                    handled = time.perf_counter() - began
                    wait = at - fault_at[name]
                    waits.append(wait)
                    handling.append(handled)
                    latencies.append(wait + handled)
        finally:
            platform.close()
    if len(latencies) != options.faults:
        raise RuntimeError(f"{len(latencies)} of {options.faults} faults were seen")
    count = len(reports)
    return {
        "fault_to_requeue_p50_s": round(statistics.median(latencies), 3),
        "fault_to_requeue_p99_s": round(percentile(latencies, 99), 3),
        "fault_to_requeue_max_s": round(max(latencies), 3),
        "wait_for_check_p99_s": round(percentile(waits, 99), 3),
        "handling_p50_s": round(statistics.median(handling), 4),
        "handling_p99_s": round(percentile(handling, 99), 4),
        "ingest_test_client_reports_per_s": round(count / report_wall, 1),
        "reports_needed_per_s": round(options.nodes / interval, 1),
        "reports": count,
        "faults": len(latencies),
    }


def run_health_bench(options: HealthBenchOptions) -> dict[str, Any]:
    """The whole report: fault to requeue, the metrics render and the agent's CPU per check."""
    report: dict[str, Any] = measure_fault_to_requeue(options)
    report.update(
        measure_intake(options.nodes, options.interval_s, options.batch_size, GPUS_PER_NODE)
    )
    metrics = measure_metrics_render(nodes=options.metrics_nodes, gpus_per_node=GPUS_PER_NODE)
    agent = measure_agent_cpu(nodes=64, gpus_per_node=GPUS_PER_NODE)
    report["metrics_render_s"] = round(metrics["metrics_render_s"], 3)
    report["metrics_bytes"] = int(metrics["metrics_bytes"])
    report["metrics_series"] = int(metrics["metrics_series"])
    report["agent_cpu_ms_per_node_check"] = round(agent["agent_cpu_ms_per_node_check"], 2)
    report["goals_met"] = {
        "fault_to_requeue_p99_s": report["fault_to_requeue_p99_s"] <= GOAL_FAULT_TO_REQUEUE_P99_S,
        "metrics_render_s": (
            None
            if report["metrics_render_s"] is None
            else report["metrics_render_s"] <= GOAL_METRICS_RENDER_S
        ),
    }
    report["settings"] = {
        "nodes": options.nodes,
        "gpus_per_node": GPUS_PER_NODE,
        "interval_s": options.interval_s,
        "faults": options.faults,
        "intervals": options.intervals,
        "seed": options.seed,
        "metrics_nodes": options.metrics_nodes,
        "batch_size": options.batch_size,
        "runs": "fault to requeue: in-process control plane (SQLite, fake executor, manual "
        "clock; real API, ingest, remediation and control loop); intake: kiban up (uvicorn, "
        "SQLite, local executor, no node agent) over HTTP",
    }
    report["machine"] = describe_machine()
    return report


def health_table(report: dict[str, Any]) -> Any:
    """The readable table: each measure, its goal, and what it means."""
    from rich.table import Table

    from kiban.bench.machine import machine_line

    def cell(key: str, unit: str) -> str:
        value = report.get(key)
        return "not measured" if value is None else f"{value:,}{unit}"

    settings = report["settings"]
    table = Table(title="kiban bench health", title_justify="left", header_style="bold")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("goal", justify="right")
    table.add_column("what it means", style="dim", overflow="fold")
    table.add_row(
        "fault to requeue p50",
        cell("fault_to_requeue_p50_s", " s"),
        "",
        f"from the fault in a reading to the node cordoned and its jobs requeued; "
        f"{settings['interval_s']:g} s checks",
    )
    table.add_row(
        "fault to requeue p99",
        cell("fault_to_requeue_p99_s", " s"),
        f"<= {GOAL_FAULT_TO_REQUEUE_P99_S:g} s",
        f"{report['faults']} faults on {settings['nodes']:,} nodes",
    )
    table.add_row("  of which: wait for the check p99", cell("wait_for_check_p99_s", " s"), "", "")
    table.add_row(
        "  of which: control plane p99",
        cell("handling_p99_s", " s"),
        "",
        "the report's POST and the loop pass that requeues",
    )
    table.add_row(
        "reports ingested/s, one per POST",
        cell("ingest_reports_per_s", ""),
        f">= {report['reports_needed_per_s']:,}",
        "kiban up over HTTP, each node's report on its own; below the goal: a backlog",
    )
    table.add_row(
        f"reports ingested/s, {report['ingest_batch_size']} per POST",
        cell("ingest_batched_reports_per_s", ""),
        f">= {report['reports_needed_per_s']:,}",
        f"the same reports batched (an agent serving several nodes); "
        f"x{report['ingest_batched_speedup']} the per-node rate",
    )
    table.add_row(
        "  server CPU per report",
        f"{report['ingest_server_cpu_ms_per_report']} ms / "
        f"{report['ingest_batched_server_cpu_ms_per_report']} ms",
        "",
        "one per POST / batched",
    )
    table.add_row(
        "  through the test client",
        cell("ingest_test_client_reports_per_s", ""),
        "",
        "the simulation's reports, one at a time, in process",
    )
    table.add_row(
        "/metrics render",
        cell("metrics_render_s", " s"),
        f"<= {GOAL_METRICS_RENDER_S:g} s",
        f"{settings['metrics_nodes']:,} nodes x {settings['gpus_per_node']} GPUs",
    )
    table.add_row("/metrics size", cell("metrics_bytes", " bytes"), "", "")
    table.add_row("agent CPU per node check", cell("agent_cpu_ms_per_node_check", " ms"), "", "")
    table.caption = f"{settings['runs']}; machine: {machine_line(report['machine'])}"
    table.caption_justify = "left"
    return table
