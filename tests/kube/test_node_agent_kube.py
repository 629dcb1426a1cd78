"""The node agent on the real API server: its conditions land on the Node object next to the
kubelet's (KWOK's), in NPD's shape, and the Kubernetes executor calls the node unhealthy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_support import eventually

from kiban.devtools.kube import ControlPlane
from kiban.executors.kubernetes import KubernetesExecutor, KubernetesOptions
from kiban.health.agent import NodeAgent
from kiban.health.kube_conditions import NodeConditionWriter
from kiban.health.sources import DirectoryReadings
from kiban.testing import ManualClock
from kiban.testing.health import node_reading, with_gpu

pytestmark = pytest.mark.kube


def conditions_of(core: Any, node: str) -> dict[str, Any]:
    return {c.type: c for c in core.read_node_status(node).status.conditions or []}


def test_the_agent_writes_gpu_conditions_the_executor_reads(
    core: Any, control_plane: ControlPlane, tmp_path: Path
) -> None:
    node = core.list_node().items[0].metadata.name
    write = tmp_path / f"{node}.json"
    write.write_text(node_reading(node, gpus=2).model_dump_json())
    clock = ManualClock(1_800_000_000.0)
    writer = NodeConditionWriter(core)
    agent = NodeAgent([node], DirectoryReadings(tmp_path), clock, sinks=[writer])
    executor = KubernetesExecutor.connect(control_plane.kubeconfig, KubernetesOptions())

    def view() -> Any:
        return next(n for n in executor.nodes() if n.name == node)

    try:
        agent.check(node)
        healthy = conditions_of(core, node)
        assert healthy["GpuEcc"].status == "False"
        assert "Ready" in healthy  # the kubelet's (KWOK's) conditions are kept
        eventually(lambda: view().healthy, what="the node healthy in the executor's view")

        sick = with_gpu(node_reading(node, gpus=2), 1, ecc_volatile_uncorrectable=2)
        write.write_text(sick.model_dump_json())
        clock.advance(30)
        agent.check(node)
        ecc = conditions_of(core, node)["GpuEcc"]
        assert (ecc.status, ecc.reason) == ("True", "EccVolatileUncorrectable")
        assert "GPU 1 (GPU-00000001" in ecc.message
        assert ecc.last_transition_time.timestamp() == 1_800_000_030.0
        assert ecc.last_heartbeat_time.timestamp() == 1_800_000_030.0
        assert conditions_of(core, node)["GpuBus"].last_transition_time.timestamp() == (
            1_800_000_000.0
        )
        assert "Ready" in conditions_of(core, node)

        def unhealthy() -> Any:
            info = view()
            return None if info.healthy else info

        info = eventually(unhealthy, what="the node unhealthy in the executor's view")
        assert "GpuEcc=True" in info.health_message
    finally:
        write.write_text(node_reading(node, gpus=2).model_dump_json())
        clock.advance(30)
        agent.check(node)  # healthy again for the tier's other tests
    try:
        eventually(lambda: view().healthy, what="the node healthy again")
    finally:
        executor.close()


def test_the_expected_gpu_count_comes_from_the_node_label(core: Any) -> None:
    node = core.list_node().items[0].metadata.name
    writer = NodeConditionWriter(core)
    core.patch_node(node, {"metadata": {"labels": {"kiban.io/gpu-count": "8"}}})
    try:
        assert writer.expected_gpus(node) == 8
    finally:
        core.patch_node(node, {"metadata": {"labels": {"kiban.io/gpu-count": None}}})
    assert writer.expected_gpus(node) is None
