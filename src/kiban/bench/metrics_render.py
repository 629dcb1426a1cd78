"""How long the control plane's ``/metrics`` takes to render at fleet scale, and its size.

A SQLite store in a temporary directory is filled with ``nodes`` nodes of ``gpus_per_node``
GPUs, every health condition the node agent reports for each (one GPU check of every ten
nodes failing), an agent reading of every GPU, and some thousands of jobs: running (one node
each), pending with reasons, finished, with their admission events. A full scrape (the store
read in one transaction, then the text written) is timed a few times; the median is reported,
and the writing of the text alone beside prometheus-client's generic path.
``kiban bench health`` reports it with the other health figures.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import insert
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.cluster import ClusterPolicy
from kiban.health.conditions import CheckType
from kiban.observability.cluster_metrics import ClusterMetrics, families
from kiban.observability.cluster_state import read_state
from kiban.observability.exposition import Family, render
from kiban.observability.idle_gpus import IdleJob
from kiban.observability.scheduling_cycles import cycle_histogram
from kiban.scheduler.reasons import ReasonCode
from kiban.services.policy import apply_policy, current_policy
from kiban.store.db import make_engine, migrate, session_factory
from kiban.store.models import Event, Job, Replica
from kiban.store.models_accounting import TenantUsage
from kiban.store.models_nodes import Node, NodeCondition, NodeReadingRow

NOW = 1_700_000_000.0
TENANTS = 16
QUEUES_PER_TENANT = 2
RUNNING_JOBS = 4000
PENDING_JOBS = 2000
FINISHED_JOBS = 4000
IDLE_JOBS = 200
AGENT_CHECKS = [c for c in CheckType if c is not CheckType.ALLREDUCE_DEGRADED]
PENDING_REASONS = [
    ReasonCode.QUEUE_QUOTA_EXHAUSTED,
    ReasonCode.INSUFFICIENT_CAPACITY,
    ReasonCode.COHORT_EXHAUSTED,
    ReasonCode.BLOCKED_BY_QUEUE_HEAD,
]
BATCH = 5000


class _Fixed:
    """The benchmark's fixed now."""

    def now(self) -> float:
        return NOW


def measure_metrics_render(
    nodes: int = 16384, gpus_per_node: int = 8, repeats: int = 5
) -> dict[str, float]:
    """The median seconds of a full ``/metrics`` render (wall and CPU), its bytes and its
    series (samples)."""
    with tempfile.TemporaryDirectory(prefix="kiban-metrics-bench-") as home:
        engine = make_engine(f"sqlite:///{Path(home) / 'kiban.db'}")
        try:
            migrate(engine)
            sessions = session_factory(engine)
            with sessions() as session:
                _fill(session, nodes, gpus_per_node)
                policy = current_policy(session)
            idle = _IdleJobs(
                tuple(
                    IdleJob(f"job-{i:06d}", _tenant(i), _queue(i), gpus_per_node, NOW - 3600)
                    for i in range(min(IDLE_JOBS, RUNNING_JOBS, nodes))
                )
            )
            cycles = cycle_histogram()
            for i in range(1000):
                cycles.observe(0.001 * (i % 50))
            metrics = ClusterMetrics(sessions, lambda: policy, _Fixed(), cycles=cycles, idle=idle)
            writer, generic = _exposition_side_by_side(sessions, policy, idle, repeats)
            times, cpu, text = [], [], b""
            for _ in range(repeats):
                started, used = time.perf_counter(), time.process_time()
                text = metrics.render()
                times.append(time.perf_counter() - started)
                cpu.append(time.process_time() - used)
        finally:
            engine.dispose()
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    return {
        "metrics_render_s": statistics.median(times),
        # CPU seconds of the same renders: what the render costs on a machine shared with
        # other work, where the wall time also counts the waits for a core
        "metrics_render_cpu_s": statistics.median(cpu),
        "metrics_bytes": float(len(text)),
        "metrics_series": float(series),
        # the text alone, from one state read: kiban's writer and prometheus-client's generic
        # path (a Sample per series) side by side
        "metrics_exposition_s": writer,
        "metrics_exposition_generic_s": generic,
    }


def _exposition_side_by_side(
    sessions: sessionmaker[Session], policy: ClusterPolicy, idle: _IdleJobs, repeats: int
) -> tuple[float, float]:
    """Median seconds to write the same families with ``exposition.render`` and with
    prometheus-client's ``generate_latest`` (the families rebuilt as its own, untimed)."""
    with sessions() as session:
        state = read_state(session, policy, NOW)
    found = list(families(state, idle.idle))
    standard = _Families([_as_client_family(f) for f in found])
    writer, generic = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        render(found)
        writer.append(time.perf_counter() - started)
        started = time.perf_counter()
        generate_latest(standard)
        generic.append(time.perf_counter() - started)
    return statistics.median(writer), statistics.median(generic)


class _Families:
    def __init__(self, found: list[Metric]) -> None:
        self.found = found

    def collect(self) -> list[Metric]:
        return self.found


def _as_client_family(family: Family | Metric) -> Metric:
    if not isinstance(family, Family):
        return family
    made: GaugeMetricFamily | CounterMetricFamily
    if family.type == "counter":
        made = CounterMetricFamily(family.name, family.documentation, labels=family.labels)
    else:
        made = GaugeMetricFamily(family.name, family.documentation, labels=family.labels)
    for values, value in family.rows:
        made.add_metric(list(values), value)
    for values in family.ones:
        made.add_metric(list(values), 1)
    return made


class _IdleJobs:
    def __init__(self, idle: tuple[IdleJob, ...]) -> None:
        self.idle = idle


def _tenant(i: int) -> str:
    return f"team-{i % TENANTS:02d}"


def _queue(i: int) -> str:
    return f"{_tenant(i)}-q{(i // TENANTS) % QUEUES_PER_TENANT}"


def _fill(session: Session, nodes: int, gpus: int) -> None:
    """The cluster described in the module's docstring, committed."""
    queues = [
        {
            "name": _queue(t + TENANTS * q),
            "tenant": _tenant(t),
            "cohort": "all",
            "quota": {"gpu": nodes * gpus // (TENANTS * QUEUES_PER_TENANT)},
        }
        for t in range(TENANTS)
        for q in range(QUEUES_PER_TENANT)
    ]
    apply_policy(
        session,
        {"cohorts": [{"name": "all"}], "queues": queues},
        actor="bench",
        at=NOW,
        nodes_known=False,
    )
    names = [f"gpu-node-{i:05d}" for i in range(nodes)]
    _bulk(
        session,
        Node,
        (
            {
                "name": name,
                "gpus": gpus,
                "cpu_millis": 128_000,
                "memory": 2**40,
                "labels": {"kubernetes.io/hostname": name},
                "healthy": True,
                "health_message": "",
                "cordoned": i % 500 == 0,
                "cordon_source": "remediation" if i % 500 == 0 else "",
                "updated_at": NOW,
                "agent_address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}:9400",
                "agent_reported_at": NOW - 5,
            }
            for i, name in enumerate(names)
        ),
    )
    _bulk(
        session,
        NodeCondition,
        (
            {
                "node": name,
                "type": check.value,
                "status": "True" if (i + k) % 10 == 0 and k == i % len(AGENT_CHECKS) else "False",
                "reason": "Checked",
                "message": "",
                "last_transition_time": NOW - 60,
                "updated_at": NOW,
                "streak": 3,
            }
            for i, name in enumerate(names)
            for k, check in enumerate(AGENT_CHECKS)
        ),
    )
    _bulk(
        session,
        NodeReadingRow,
        ({"node": name, "taken_at": NOW - 5, "reading": _reading(name, gpus)} for name in names),
    )
    running = min(RUNNING_JOBS, nodes)
    jobs: list[dict[str, Any]] = []
    for i in range(running + PENDING_JOBS + FINISHED_JOBS):
        state = "Running" if i < running else "Pending" if i < running + PENDING_JOBS else None
        state = state or ("Succeeded" if i % 3 else "Failed")
        pending = state == "Pending"
        jobs.append(
            {
                "id": f"job-{i:06d}",
                "name": "job",
                "tenant": _tenant(i),
                "queue": _queue(i),
                "state": state,
                "priority": 0,
                "spec": {},
                "submitted_at": NOW - 7200 + i,
                "admitted_at": None if pending else NOW - 3600 + i,
                "started_at": None if pending else NOW - 3600 + i,
                "finished_at": NOW - 60 if state in ("Succeeded", "Failed") else None,
                "gpus": gpus,
                "replicas": 1,
                "reason_code": PENDING_REASONS[i % len(PENDING_REASONS)].value if pending else None,
                "eta": NOW + (i % 100) * 60 - 600 if pending else None,
            }
        )
    _bulk(session, Job, jobs)
    _bulk(
        session,
        Replica,
        (
            {
                "job_id": f"job-{i:06d}",
                "attempt": 1,
                "task": "worker",
                "index": 0,
                "rank": 0,
                "node": names[i],
                "gpu_ids": list(range(gpus)),
                "cpu_millis": 1000,
                "memory": 2**30,
                "active": True,
                "state": "Running",
            }
            for i in range(running)
        ),
    )
    _bulk(
        session,
        Event,
        (
            {
                "object_kind": "Job",
                "object_name": job["id"],
                "tenant": job["tenant"],
                "type": "Normal",
                "reason": "Admitted",
                "message": "admitted",
                "at": job["admitted_at"],
            }
            for job in jobs
            if job["admitted_at"] is not None
        ),
    )
    _bulk(
        session,
        TenantUsage,
        ({"tenant": _tenant(t), "usage": 1e6 * (t + 1), "updated_at": NOW} for t in range(TENANTS)),
    )
    session.commit()


def _reading(node: str, gpus: int) -> dict[str, Any]:
    return {
        "node": node,
        "taken_at": NOW - 5,
        "nvml_available": True,
        "gpus": [
            {"index": g, "uuid": f"GPU-{node}-{g}", "model": "H100", "utilization_percent": 50.0}
            for g in range(gpus)
        ],
    }


def _bulk(session: Session, model: Any, rows: Any) -> None:
    """Insert ``rows`` (dicts) in batches: the store's executemany path, not one ORM object
    per row."""
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH:
            session.execute(insert(model), batch)
            batch = []
    if batch:
        session.execute(insert(model), batch)
