"""The node agent's CPU per node per check pass (``kiban bench health`` reports it).

Synthetic nodes of healthy H100s whose counters move a little each pass (so the rise checks
compare real numbers) go through the agent's whole pass: the read from memory, every check in
its worker thread under the deadline, the report built and serialized as it is posted, then
``/metrics`` rendered once per pass as a scrape would. The figure is the process's CPU time
(``time.process_time``, every thread) of the measured passes over nodes x passes; a first
warm-up pass is not counted (it has no previous reading to compare with).
"""

from __future__ import annotations

import time

from prometheus_client import generate_latest

from kiban.health.agent import NodeAgent
from kiban.health.agent_metrics import agent_registry
from kiban.health.readings import NodeReading
from kiban.testing import ManualClock
from kiban.testing.health import healthy_gpu, node_reading


class SyntheticReadings:
    """Each read of a node: its GPUs with the counters a little higher than the last time."""

    def __init__(self, gpus_per_node: int) -> None:
        self.gpus_per_node = gpus_per_node
        self.passes: dict[str, int] = {}

    def read(self, node: str) -> NodeReading:
        step = self.passes.get(node, 0)
        self.passes[node] = step + 1
        gpus = [
            healthy_gpu(
                i,
                pcie_replay_counter=step,
                nvlink_crc_errors=0,
                ecc_volatile_correctable=step,
                utilization_percent=float((step * 7 + i) % 100),
            )
            for i in range(self.gpus_per_node)
        ]
        return node_reading(node, gpus=gpus)

    def close(self) -> None:
        pass


def measure_agent_cpu(nodes: int, gpus_per_node: int, passes: int = 3) -> dict[str, float]:
    """CPU milliseconds the agent spends per node per check pass (checks, report, /metrics)."""
    if nodes < 1 or gpus_per_node < 0 or passes < 1:
        raise ValueError("nodes and passes must be at least 1, gpus_per_node at least 0")
    names = [f"node-{i:05d}" for i in range(nodes)]
    clock = ManualClock()
    agent = NodeAgent(names, SyntheticReadings(gpus_per_node), clock, interval_s=30.0)
    registry = agent_registry(agent)

    def one_pass() -> tuple[float, float]:
        began = time.process_time()
        for report in agent.tick():
            report.model_dump_json(by_alias=True)
        checked = time.process_time()
        generate_latest(registry)
        clock.advance(agent.interval_s)
        return checked - began, time.process_time() - checked

    one_pass()  # warm-up: the first pass has no previous reading
    check_s = render_s = 0.0
    for _ in range(passes):
        checks, render = one_pass()
        check_s += checks
        render_s += render
    per = 1000.0 / (nodes * passes)
    return {
        "agent_cpu_ms_per_node_check": (check_s + render_s) * per,
        "agent_checks_cpu_ms_per_node": check_s * per,
        "agent_metrics_cpu_ms_per_node": render_s * per,
        "nodes": float(nodes),
        "gpus_per_node": float(gpus_per_node),
        "passes": float(passes),
    }
