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
    count: int, gpus_per_node: int, cpus: int = 8, memory: int = 32 * 2**30, physical: int = 0
) -> list[NodeInfo]:
    """``count`` identical virtual nodes ``node-0`` ... so one machine can run a multi-node job.

    Where the machine has ``physical`` GPUs enough for all of them, node ``i`` gets the
    machine's GPUs ``i * gpus_per_node ...`` of its own (a multi-node NCCL job then has one GPU
    per rank); otherwise every node's GPUs are the machine's first ones, shared.
    """
    own = gpus_per_node > 0 and count * gpus_per_node <= physical
    return [
        NodeInfo(
            name=f"node-{i}",
            gpus=gpus_per_node,
            cpu_millis=cpus * 1000,
            memory=memory,
            labels={"kubernetes.io/hostname": f"node-{i}"},
            gpu_devices=(tuple(range(i * gpus_per_node, (i + 1) * gpus_per_node)) if own else ()),
        )
        for i in range(count)
    ]
