"""A real Prometheus scrapes a running kiban: every dashboard query and every alert expression
returns series.

The platform is a real ``kiban up`` on the local executor (virtual nodes of 2 GPUs and one
of 1) whose node agent reads its GPUs from files (the reading seam, one ``NodeReading`` per
node, every DCGM field given). Jobs run, finish, wait, are preempted and wait past their
forecast start; one node is throttled and another gets an uncorrectable ECC error and a
critical Xid, so that conditions are True; an embedding service answers one request, so that
its model server's series have samples. A throwaway Prometheus scrapes kiban's HTTP service
discovery every second, loading the shipped alert rules.

Dashboard queries are evaluated as they stand. An alert expression is a condition that
rightly holds for nothing on a healthy cluster (``kiban_remediation_breaker_open == 1``), so
it is evaluated with every comparison turned into a ``bool`` comparison (which answers 0 or 1
for each series instead of filtering): it then returns series exactly when the series it
reads exist and its functions and label matching are right. Each operand of a top-level
``or`` is evaluated on its own (each must find its series), except ``absent(...)``, whose
empty answer is the healthy one. The loaded rules must evaluate without error, too.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prom_support import ALERTS, DASHBOARDS

from kiban.devtools.prometheus import (
    PrometheusError,
    ThrowawayPrometheus,
    comparisons_as_bool,
    split_top_level_or,
)
from kiban.health.readings import GpuReading, NodeReading, XidEvent
from kiban.testing.models import embedding_model_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from e2e_support import KibanServer, eventually, job_manifest, server_factory

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e]

NODES = {"node-0": 2, "node-1": 2, "node-2": 2, "node-3": 1}  # name: GPUs
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
# Ignores SIGTERM: past its maxRuntime it holds its GPU until its grace period ends.
OVERRUN = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
]
SERIES_TIMEOUT = 45.0  # the idle tracker judges every 15 s: two judgements and then some
LOAD_TIMEOUT = 180.0  # a model server's start on a loaded 2-core machine
PRIORITIES = [
    {"name": "low", "value": 100},
    {"name": "normal", "value": 1000, "default": True},
    {"name": "high", "value": 10000, "preemptionPolicy": "PreemptLowerPriority"},
]


def gpu_reading(node: str, index: int, **fields: Any) -> GpuReading:
    """A healthy, idle GPU with every field the DCGM series come from (``fields`` override)."""
    healthy: dict[str, Any] = {
        "uuid": f"GPU-{node}-{index}",
        "model": "NVIDIA H100 80GB HBM3",
        "ecc_volatile_uncorrectable": 0,
        "ecc_aggregate_uncorrectable": 0,
        "ecc_volatile_correctable": 0,
        "ecc_aggregate_correctable": 3,
        "remapped_rows_correctable": 1,
        "remapped_rows_uncorrectable": 0,
        "remap_pending": False,
        "remap_failure": False,
        "pcie_link_gen": 5,
        "pcie_link_gen_max": 5,
        "pcie_link_width": 16,
        "pcie_link_width_max": 16,
        "pcie_replay_counter": 0,
        "fabric_state": "completed",
        "nvlink_links_down": 0,
        "nvlink_crc_errors": 0,
        "nvlink_bandwidth_total": 1000 * (index + 1),
        "thermal_throttle": False,
        "power_throttle": False,
        "utilization_percent": 0.0,
        "memory_used_mib": 1024.0,
        "memory_free_mib": 80 * 1024.0 - 1024.0,
        "temperature_c": 40.0 + index,
        "power_w": 90.0,
    }
    return GpuReading(index=index, **(healthy | fields))


def write_reading(directory: Path, node: str, *gpus: GpuReading) -> None:
    """The agent's next reading of ``node`` (through the reading seam)."""
    gpus = gpus or tuple(gpu_reading(node, i) for i in range(NODES[node]))
    reading = NodeReading(
        node=node,
        taken_at=time.time(),
        nvml_available=True,
        driver_version="550.54.15",
        gpus=gpus,
    )
    (directory / f"{node}.json").write_text(reading.model_dump_json())


def cluster_file() -> dict[str, Any]:
    return {
        "nodes": [
            {"name": name, "gpus": gpus, "cpus": 8, "memory": "8Gi"} for name, gpus in NODES.items()
        ],
        "queues": [{"name": "default", "quota": {"gpu": sum(NODES.values())}}],
        "priorityClasses": PRIORITIES,
        # A running job's GPUs under 5 % for 10 s are idle (the readings say 0 %). The window
        # also bounds a reading's age: on a loaded machine reports may lag a few seconds.
        "idleGpus": {"utilizationPercent": 5, "window": 10},
        # Throttling is a warning: recorded as a remediation action that does nothing. No rule
        # acts on the faults injected below, so that the jobs stay where they are.
        "health": {
            "rules": [{"name": "note-throttling", "condition": "GpuThermal", "action": "none"}]
        },
        # A budget that only warns, so that kiban_budget_used_ratio has a series.
        "budgets": [{"tenant": "default", "gpuHours": 100000, "action": "warn"}],
    }


@pytest.fixture(scope="module")
def busy_kiban(
    prometheus_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KibanServer]:
    """kiban with its agent on the reading seam; jobs running, finished, pending, preempted and
    late; a throttled node, and a node with an uncorrectable ECC error and a critical Xid."""
    readings = tmp_path_factory.mktemp("readings")
    readings.chmod(0o755)
    for node in NODES:
        write_reading(readings, node)
    with server_factory(tmp_path_factory) as start:
        server = start(
            nodes=None,
            config=cluster_file(),
            extra_args=["--agent-readings-dir", str(readings), "--health-interval", "1"],
        )
        # A model server (no GPU) loads while the jobs start.
        service = {
            "apiVersion": "kiban/v1",
            "kind": "Service",
            "metadata": {"name": "embedder"},
            "spec": {
                "model": {"name": "minilm", "storageUri": f"file://{embedding_model_path()}"},
                "resources": {"gpu": 0, "cpu": 0.5, "memory": "1Gi"},
            },
        }
        (server.workdir / "embedder.yaml").write_text(yaml.safe_dump(service))
        url = server.ok("serve", server.workdir / "embedder.yaml").strip()
        done = server.submit(job_manifest("done", ["true"], gpu=0), "done.yaml")
        # The 2-GPU nodes: two low jobs and one of normal priority fill them.
        low = [
            server.submit(job_manifest(f"low-{i}", SLEEP, gpu=2, priorityClass="low"), f"l{i}.yaml")
            for i in range(2)
        ]
        steady = server.submit(job_manifest("steady", SLEEP, gpu=2), "steady.yaml")
        for job in (*low, steady):
            server.wait_for_state(job, "Running")
        # node-3's GPU: a job past its maxRuntime that holds it through its grace period, and
        # one forecast to start when that maxRuntime ends, still waiting after.
        overrun = server.submit(
            job_manifest("overrun", OVERRUN, gpu=1, maxRuntime=2, terminationGracePeriod=300),
            "overrun.yaml",
        )
        server.wait_for_state(overrun, "Running")
        server.submit(job_manifest("late", SLEEP, gpu=1), "late.yaml")
        server.wait_for_state(done, "Succeeded")
        # A high-priority job preempts a low one, which waits again.
        urgent = server.submit(
            job_manifest("urgent", SLEEP, gpu=2, priorityClass="high"), "urgent.yaml"
        )
        server.wait_for_state(urgent, "Running")
        # A gang that cannot fit while the others run.
        server.submit(job_manifest("gang", SLEEP, replicas=2, gpu=2), "gang.yaml")
        # node-2 is throttled (a warning); node-1's second GPU has an uncorrectable ECC error
        # and a critical Xid (79: fell off the bus). Injected once the jobs are placed.
        write_reading(
            readings, "node-2", *(gpu_reading("node-2", i, thermal_throttle=True) for i in range(2))
        )
        faulty = gpu_reading(
            "node-1",
            1,
            ecc_volatile_uncorrectable=1,
            ecc_aggregate_uncorrectable=1,
            xids=(XidEvent(code=79, at=time.time()),),
        )
        write_reading(readings, "node-1", gpu_reading("node-1", 0), faulty)
        # One request through the router, so the model server's labelled series exist.
        eventually(
            lambda: server.client.service("embedder")["state"] == "Ready",
            timeout=LOAD_TIMEOUT,
            what="the embedding service to be ready",
        )
        answer = httpx.post(
            f"{url}/openai/v1/embeddings",
            json={"model": "minilm", "input": ["a cat sits on the mat"]},
            headers={"Authorization": f"Bearer {server.token}"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        yield server


def dashboard_queries(serving: bool) -> list[tuple[str, str]]:
    """(where, expr) of every target of every panel of the serving dashboard, or of the others."""
    found = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        if (dashboard["uid"] == "kiban-serving") != serving:
            continue
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                where = f"{dashboard['uid']}: {panel['title']} [{target['refId']}]"
                found.append((where, target["expr"]))
    return found


def alert_queries() -> list[tuple[str, str]]:
    """(where, expr) of each operand of each alert's expression, comparisons made ``bool``."""
    found = []
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            operands = split_top_level_or(comparisons_as_bool(rule["expr"]))
            for index, operand in enumerate(operands):
                if operand.startswith("absent("):
                    continue
                found.append((f"{rule['alert']} [operand {index}]", operand))
    return found


@pytest.fixture(scope="module")
def prom(busy_kiban: KibanServer) -> Iterator[ThrowawayPrometheus]:
    """A Prometheus scraping ``busy_kiban`` every second, once its control plane and node
    agent are scraped."""
    discovery = f"{busy_kiban.url}/api/v1/discovery/prometheus"
    with ThrowawayPrometheus(discovery, rule_files=[ALERTS], interval_s=1.0) as server:

        def targets_up() -> bool:
            up = {t.labels.get("kiban_component") for t in server.targets() if t.health == "up"}
            return {"control-plane", "node-agent"} <= up

        try:
            server.wait_for(targets_up, "the control plane and the node agent to be scraped")
        except PrometheusError as waited:
            pytest.fail(f"{waited}\ntargets: {server.targets()}\n{busy_kiban.log_tail()}")
        yield server


def assert_all_return_series(prom: ThrowawayPrometheus, queries: list[tuple[str, str]]) -> None:
    """Poll until each query has returned series once (rate() and increase() need two
    samples, histograms an observation, idle GPUs their window), or fail naming the others."""
    empty = dict(queries)
    deadline = time.monotonic() + SERIES_TIMEOUT
    while empty and time.monotonic() < deadline:
        for where, expr in list(empty.items()):
            if prom.query(expr):
                del empty[where]
        if empty:
            time.sleep(0.5)
    assert not empty, "queries that returned no series:\n" + "\n".join(
        f"  {where}: {' '.join(expr.split())}" for where, expr in empty.items()
    )


def test_every_panel_and_alert_expression_returns_series(prom: ThrowawayPrometheus) -> None:
    assert_all_return_series(prom, dashboard_queries(serving=False) + alert_queries())
    eventually(
        lambda: all(rule["health"] == "ok" for rule in prom.rules()),
        what="every loaded alert rule to evaluate without error",
        timeout=10,
    )
    loaded = {rule["name"] for rule in prom.rules()}
    shipped = {query.split(" [")[0] for query, _ in alert_queries()}
    assert loaded == shipped


class ModelServerNotScraped(AssertionError):
    """Discovery listed no model server that Prometheus could scrape."""


def test_every_serving_panel_returns_series(
    busy_kiban: KibanServer, prom: ThrowawayPrometheus
) -> None:
    """The model server is found through discovery and scraped like the rest."""

    def model_server_up() -> bool:
        return any(
            t.labels.get("kiban_component") == "model-server" and t.health == "up"
            for t in prom.targets()
        )

    try:
        prom.wait_for(model_server_up, "the model server to be scraped", timeout=SERIES_TIMEOUT)
    except PrometheusError:
        listed = httpx.get(f"{busy_kiban.url}/api/v1/discovery/prometheus", timeout=10).json()
        components = [group["labels"].get("kiban_component") for group in listed]
        raise ModelServerNotScraped(
            f"no model server scraped; discovery lists {components}: {listed}"
        ) from None
    assert_all_return_series(prom, dashboard_queries(serving=True))
