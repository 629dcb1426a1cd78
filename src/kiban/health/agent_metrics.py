"""The node agent's ``/metrics``: GPU telemetry under dcgm-exporter's names and labels, with
kiban's ``job``, ``tenant`` and ``queue`` on each GPU a job holds, and the checks' own series.

A collector over the agent's latest readings: nothing is kept twice, and a GPU field NVML did
not give (None) has no sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from kiban.health.agent import NodeAgent
from kiban.health.readings import GpuReading

GPU_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname", "job", "tenant", "queue"]


def _flag(value: bool | None) -> float | None:
    return None if value is None else float(value)


# (name, help, the GPU's value); dcgm-exporter's units: MiB, degrees C, W, percent, counts.
GPU_SERIES: list[tuple[str, str, Callable[[GpuReading], float | None]]] = [
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.utilization_percent),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda g: g.memory_used_mib),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda g: g.memory_free_mib),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temperature_c),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_w),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "Total number of PCIe retries.",
        lambda g: g.pcie_replay_counter,
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors.",
        lambda g: g.remapped_rows_uncorrectable,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors.",
        lambda g: g.remapped_rows_correctable,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed (1) or not (0).",
        lambda g: _flag(g.remap_failure),
    ),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "Total number of NVLink bandwidth counters for all lanes (KiB of data sent and "
        "received over the links that are up, since the driver loaded).",
        lambda g: g.nvlink_bandwidth_total,
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
        lambda g: g.ecc_volatile_correctable,
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        lambda g: g.ecc_volatile_uncorrectable,
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "Total number of single-bit persistent ECC errors.",
        lambda g: g.ecc_aggregate_correctable,
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "Total number of double-bit persistent ECC errors.",
        lambda g: g.ecc_aggregate_uncorrectable,
    ),
]


class AgentCollector(Collector):
    """Renders the agent's latest state at each scrape."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(name, help_text, labels=GPU_LABELS)
            for name, help_text, _ in GPU_SERIES
        }
        xid = GaugeMetricFamily(
            "DCGM_FI_DEV_XID_ERRORS",
            "Value of the last XID error encountered (0 if none).",
            labels=GPU_LABELS,
        )
        status = GaugeMetricFamily(
            "kiban_agent_check_status",
            "1 for each check's current status on each node.",
            labels=["node", "check", "status"],
        )
        for node, state in self.agent.state.items():
            reading = state.reading
            holders = {a.gpu: a for a in state.allocations}
            for gpu in reading.gpus if reading is not None else ():
                held = holders.get(gpu.index)
                labels = [
                    str(gpu.index),
                    gpu.uuid,
                    f"nvidia{gpu.index}",
                    gpu.model,
                    node,
                    held.job if held else "",
                    held.tenant if held else "",
                    held.queue if held else "",
                ]
                for name, _, value_of in GPU_SERIES:
                    value = value_of(gpu)
                    if value is not None:
                        families[name].add_metric(labels, float(value))
                xid.add_metric(labels, float(state.last_xid.get(gpu.uuid or str(gpu.index), 0)))
            for condition in state.conditions.values():
                status.add_metric([node, condition.type.value, condition.status.value], 1.0)
        yield from families.values()
        yield xid
        yield status
        seconds = GaugeMetricFamily(
            "kiban_agent_check_seconds",
            "How long each check took in the latest pass (seconds).",
            labels=["check"],
        )
        for check, took in self.agent.check_seconds.items():
            seconds.add_metric([check.value], took)
        yield seconds


def agent_registry(agent: NodeAgent) -> CollectorRegistry:
    """A registry of the agent's series only (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(agent))
    return registry
