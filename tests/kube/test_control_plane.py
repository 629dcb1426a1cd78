"""The local control plane against the official client: fake GPU nodes and KWOK's pod stages."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kube_support import NAMESPACE, eventually, pod_body, unique, watch_phases
from kubernetes.client.exceptions import ApiException

from kiban.devtools.kube import ControlPlane, supervisor
from kiban.devtools.kube.fakenodes import (
    GPU_PRODUCT_LABEL,
    HOSTNAME_LABEL,
    ISLAND_LABEL,
    LOCAL_BLOCK_LABEL,
    NETWORK_BLOCK_LABEL,
)

pytestmark = pytest.mark.kube


def ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def test_api_server_reports_the_pinned_version(control_plane: ControlPlane) -> None:
    from kubernetes import client, config

    from kiban.devtools.kube.binaries import KUBERNETES_VERSION

    api_client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    try:
        info = client.VersionApi(api_client).get_code()
    finally:
        api_client.close()
    assert info.git_version == KUBERNETES_VERSION
    assert control_plane.server.startswith("https://127.0.0.1:")


def test_fake_nodes_have_gpus_labels_and_are_ready(control_plane: ControlPlane, core: Any) -> None:
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert set(nodes) == set(control_plane.node_names)
    assert len(nodes) == 3
    local_blocks = set()
    for name, node in nodes.items():
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        assert node.status.capacity["nvidia.com/gpu"] == "2"
        assert node.status.allocatable["nvidia.com/gpu"] == "2"
        assert {"cpu", "memory", "pods"} <= set(node.status.allocatable)
        labels = node.metadata.labels
        assert labels[GPU_PRODUCT_LABEL] == "H100"
        assert labels["kiban.dev/pool"] == "test"
        assert labels[HOSTNAME_LABEL] == name
        assert labels[ISLAND_LABEL] == "island-0"
        assert labels[NETWORK_BLOCK_LABEL] == "block-0-0"
        local_blocks.add(labels[LOCAL_BLOCK_LABEL])
        assert ready(node), f"{name} is not Ready: {node.status.conditions}"
        assert not node.spec.taints  # schedulable: no not-ready taint left behind
    assert len(local_blocks) == 3  # 1x1x3: one node in each local block


def test_pod_runs_then_succeeds_after_its_sim_duration(
    control_plane: ControlPlane, core: Any
) -> None:
    name = unique("done")
    node = control_plane.node_names[0]
    core.create_namespaced_pod(
        NAMESPACE, pod_body(name, node, annotations={"kiban.dev/sim-duration": "2s"})
    )
    phases = watch_phases(core, name, until={"Succeeded", "Failed"})
    assert [phase for _, phase in phases][-2:] == ["Running", "Succeeded"]
    ran_for = phases[-1][0] - phases[-2][0]
    assert ran_for >= 1.8, f"completed {ran_for:.2f}s after Running, before its 2s"

    pod = core.read_namespaced_pod(name, NAMESPACE)
    assert pod.spec.node_name == node
    assert pod.status.pod_ip
    (container,) = pod.status.container_statuses
    assert container.state.terminated.exit_code == 0
    assert container.state.terminated.reason == "Completed"
    assert not container.ready


def test_pod_fails_with_its_sim_exit_code(control_plane: ControlPlane, core: Any) -> None:
    name = unique("fail")
    annotations = {"kiban.dev/sim-duration": "1s", "kiban.dev/sim-exit-code": "3"}
    core.create_namespaced_pod(
        NAMESPACE, pod_body(name, control_plane.node_names[1], annotations=annotations)
    )
    phases = watch_phases(core, name, until={"Succeeded", "Failed"})
    assert phases[-1][1] == "Failed"
    pod = core.read_namespaced_pod(name, NAMESPACE)
    (container,) = pod.status.container_statuses
    assert container.state.terminated.exit_code == 3
    assert container.state.terminated.reason == "Error"


def test_pod_without_sim_duration_keeps_running(control_plane: ControlPlane, core: Any) -> None:
    name = unique("serve")
    core.create_namespaced_pod(NAMESPACE, pod_body(name, control_plane.node_names[2]))
    watch_phases(core, name, until={"Running"})
    time.sleep(1.5)  # the scenario: time passes and the pod, with no sim-duration, still runs
    pod = core.read_namespaced_pod(name, NAMESPACE)
    assert pod.status.phase == "Running"
    assert pod.status.container_statuses[0].state.running is not None


def test_restart_policy_always_restarts_the_exited_container(
    control_plane: ControlPlane, core: Any
) -> None:
    name = unique("loop")
    annotations = {"kiban.dev/sim-duration": "500ms", "kiban.dev/sim-exit-code": "1"}
    core.create_namespaced_pod(
        NAMESPACE,
        pod_body(
            name, control_plane.node_names[0], annotations=annotations, restart_policy="Always"
        ),
    )

    def restarted() -> Any:
        pod = core.read_namespaced_pod(name, NAMESPACE)
        statuses = pod.status.container_statuses or []
        return pod if statuses and statuses[0].restart_count >= 2 else None

    pod = eventually(restarted, what="two restarts", timeout=20)
    assert pod.status.phase == "Running"
    last = pod.status.container_statuses[0].last_state.terminated
    assert last.exit_code == 1


def test_deleted_pod_disappears(control_plane: ControlPlane, core: Any) -> None:
    name = unique("gone")
    core.create_namespaced_pod(NAMESPACE, pod_body(name, control_plane.node_names[1]))
    watch_phases(core, name, until={"Running"})
    core.delete_namespaced_pod(name, NAMESPACE)  # the default grace period: KWOK must act

    def gone() -> bool:
        try:
            core.read_namespaced_pod(name, NAMESPACE)
        except ApiException as exc:
            return exc.status == 404
        return False

    eventually(gone, what=f"pod {name} to be deleted", timeout=20)


def test_kube_scheduler_of_the_same_release_binds_a_pod(
    control_plane: ControlPlane, core: Any
) -> None:
    """The scheduler the benchmark compares kiban with runs here and finds the fake nodes."""
    record = control_plane.start_kube_scheduler()
    try:
        name = unique("sched")
        core.create_namespaced_pod(NAMESPACE, pod_body(name, None, gpus=2))
        watch_phases(core, name, until={"Running"})
        pod = core.read_namespaced_pod(name, NAMESPACE)
        assert pod.spec.node_name in control_plane.node_names
    finally:
        supervisor.stop_from_pid_file(
            supervisor.pid_file(control_plane.directory / "run", record.name)
        )
    assert not supervisor.alive(record)
