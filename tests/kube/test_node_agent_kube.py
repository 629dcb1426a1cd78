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


def test_the_daemonsets_role_is_enough_for_the_agent_and_no_more(core: Any) -> None:
    """deploy/kubernetes/node-agent.yaml's ServiceAccount, applied for real: with its token the
    agent reads its node's label and writes its conditions; listing pods is forbidden."""
    import yaml
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient

    from kiban.health.checks import evaluate
    from kiban.health.thresholds import HealthThresholds

    root = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
    docs = [
        d
        for name in ("namespace.yaml", "node-agent.yaml")
        for d in yaml.safe_load_all((root / name).read_text())
        if d and d["kind"] != "DaemonSet"
    ]
    dynamic = DynamicClient(core.api_client)
    for doc in docs:
        dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).server_side_apply(
            body=doc,
            name=doc["metadata"]["name"],
            namespace=doc["metadata"].get("namespace"),
            field_manager="kiban-tests",
            force_conflicts=True,
        )
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = core.create_namespaced_service_account_token(
        "kiban-node-agent", "kiban-system", request
    ).status.token
    configuration = client.Configuration()
    configuration.host = core.api_client.configuration.host
    configuration.ssl_ca_cert = core.api_client.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(configuration) as api_client:
        as_agent = client.CoreV1Api(api_client)
        node = core.list_node().items[0].metadata.name
        writer = NodeConditionWriter(as_agent)
        assert writer.expected_gpus(node) is None
        reading = node_reading(node, gpus=2)
        writer.write(node, evaluate(reading, None, HealthThresholds(), 2, 1.0, {}), 2.0)
        assert conditions_of(core, node)["GpuXid"].status == "False"
        with pytest.raises(ApiException) as forbidden:
            as_agent.list_pod_for_all_namespaces()
        assert forbidden.value.status == 403


def test_node_agent_once_with_kubernetes(
    core: Any, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """``kiban node-agent --kubernetes --once``: the expected count from the node's label, the
    conditions on the Node."""
    from typer.testing import CliRunner

    from kiban.cli.main import app

    node = core.list_node().items[0].metadata.name
    (tmp_path / f"{node}.json").write_text(node_reading(node, gpus=2).model_dump_json())
    core.patch_node(node, {"metadata": {"labels": {"kiban.io/gpu-count": "4"}}})
    args = ["node-agent", "--kubernetes", "--kubeconfig", str(control_plane.kubeconfig)]
    args += ["--node", node, "--readings-dir", str(tmp_path), "--once"]
    try:
        result = CliRunner().invoke(app, args, env={"KIBAN_URL": "", "KIBAN_TOKEN": ""})
        assert result.exit_code == 0, result.output
        count = conditions_of(core, node)["GpuCount"]
        assert (count.status, count.reason) == ("True", "GpuMissing")
        assert count.message == "NVML sees 2 GPUs, 4 expected"
    finally:
        core.patch_node(node, {"metadata": {"labels": {"kiban.io/gpu-count": None}}})
        (tmp_path / f"{node}.json").write_text(node_reading(node, gpus=4).model_dump_json())
        healed = CliRunner().invoke(app, args, env={"KIBAN_URL": "", "KIBAN_TOKEN": ""})
        assert healed.exit_code == 0, healed.output
    assert conditions_of(core, node)["GpuCount"].status == "False"
