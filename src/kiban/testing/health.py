"""Readings of healthy GPUs to start from, for the health checks' tables and benchmarks.

``healthy_gpu(3)`` is an H100 SXM with every field the checks need, all fine;
``healthy_gpu(3, ecc_volatile_uncorrectable=2)`` is the same GPU with one fault;
``node_reading("n1", gpus=8)`` is a node of eight of them.
"""

from __future__ import annotations

from typing import Any

from kiban.health.readings import GpuReading, NodeReading


def healthy_gpu(index: int, **faults: Any) -> GpuReading:
    """One GPU that passes every check; ``faults`` overrides any field."""
    fields: dict[str, Any] = {
        "index": index,
        "uuid": f"GPU-{index:08d}-0000-0000-0000-000000000000",
        "model": "NVIDIA H100 80GB HBM3",
        "ecc_volatile_uncorrectable": 0,
        "ecc_aggregate_uncorrectable": 0,
        "ecc_volatile_correctable": 0,
        "ecc_aggregate_correctable": 3,
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0,
        "remap_pending": False,
        "remap_failure": False,
        "pcie_link_gen": 5,
        "pcie_link_gen_max": 5,
        "pcie_link_width": 16,
        "pcie_link_width_max": 16,
        "pcie_replay_counter": 0,
        "fabric_state": "completed",
        "fabric_status": "NVML_SUCCESS",
        "nvlink_links_down": 0,
        "nvlink_crc_errors": 0,
        "nvlink_bandwidth_total": 0,
        "thermal_throttle": False,
        "power_throttle": False,
        "utilization_percent": 0.0,
        "memory_used_mib": 512.0,
        "memory_free_mib": 80_559.0,
        "temperature_c": 31.0,
        "power_w": 70.0,
    }
    fields.update(faults)
    return GpuReading(**fields)


def node_reading(
    node: str = "node-0",
    gpus: int | list[GpuReading] = 8,
    taken_at: float = 1_700_000_000.0,
    **fields: Any,
) -> NodeReading:
    """A node's reading: ``gpus`` healthy GPUs, or the GPUs given."""
    listed = [healthy_gpu(i) for i in range(gpus)] if isinstance(gpus, int) else gpus
    values: dict[str, Any] = {
        "node": node,
        "taken_at": taken_at,
        "nvml_available": True,
        "driver_version": "550.54.15",
        "gpus": tuple(listed),
    }
    values.update(fields)
    return NodeReading(**values)


def with_gpu(reading: NodeReading, index: int, **faults: Any) -> NodeReading:
    """The reading with GPU ``index`` changed by ``faults``."""
    gpus = tuple(
        gpu.model_copy(update=faults) if gpu.index == index else gpu for gpu in reading.gpus
    )
    return reading.model_copy(update={"gpus": gpus})
