"""Nodes of the local executor: this machine (GPUs found through NVML) or virtual nodes."""

from __future__ import annotations

import os

import psutil

from kiban.executors.base import NodeInfo


def count_gpus() -> int:
    """GPUs NVML sees on this machine; 0 where there is no NVIDIA driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0


def this_machine() -> NodeInfo:
    """One node: this host, with its GPUs, CPUs and memory."""
    name = os.uname().nodename or "localhost"
    return NodeInfo(
        name=name,
        gpus=count_gpus(),
        cpu_millis=(os.cpu_count() or 1) * 1000,
        memory=psutil.virtual_memory().total,
        labels={"kubernetes.io/hostname": name},
    )


def virtual_nodes(
    count: int, gpus_per_node: int, cpus: int = 8, memory: int = 32 * 2**30
) -> list[NodeInfo]:
    """``count`` identical virtual nodes ``node-0`` ... so one machine can run a multi-node job."""
    return [
        NodeInfo(
            name=f"node-{i}",
            gpus=gpus_per_node,
            cpu_millis=cpus * 1000,
            memory=memory,
            labels={"kubernetes.io/hostname": f"node-{i}"},
        )
        for i in range(count)
    ]
