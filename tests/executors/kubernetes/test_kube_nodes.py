"""Nodes from Node objects: capacity, health, schedulability, GPUs of foreign pods (no server)."""

from __future__ import annotations

from typing import Any

from kiban.executors.kubernetes.nodes import foreign_gpus, node_info
from kiban.executors.kubernetes.options import KubernetesOptions

OPTIONS = KubernetesOptions()


def node(
    *,
    ready: str = "True",
    conditions: list[dict[str, str]] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "H100"}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "95500m", "memory": "1031748120Ki"},
            "conditions": [{"type": "Ready", "status": ready}, *(conditions or [])],
        },
    }


def test_capacity_and_labels_come_from_allocatable_and_metadata() -> None:
    info = node_info(node(), OPTIONS, gpus_used_elsewhere=3)
    assert (info.name, info.gpus, info.cpu_millis, info.memory) == (
        "gpu-1",
        8,
        95500,
        1031748120 * 1024,
    )
    assert info.labels == {"nvidia.com/gpu.product": "H100"}
    assert info.healthy and not info.unschedulable and info.gpus_used_elsewhere == 3


def test_not_ready_or_a_bad_condition_or_a_noexecute_taint_is_unhealthy() -> None:
    assert not node_info(node(ready="False"), OPTIONS).healthy
    ecc = node(conditions=[{"type": "GpuEcc", "status": "True", "message": "DBE"}])
    info = node_info(ecc, OPTIONS)
    assert not info.healthy and info.health_message == "GpuEcc=True (DBE)"
    fine = node(conditions=[{"type": "GpuEcc", "status": "False"}])
    assert node_info(fine, OPTIONS).healthy
    other = KubernetesOptions(unhealthy_conditions=("GpuXid",))
    assert node_info(ecc, other).healthy  # only the configured condition types count
    drained = node(taints=[{"key": "maintenance", "effect": "NoExecute"}])
    assert "taint maintenance:NoExecute" in node_info(drained, OPTIONS).health_message


def test_cordon_or_an_untolerated_noschedule_taint_takes_no_new_work_but_stays_healthy() -> None:
    cordoned = node_info(node(unschedulable=True), OPTIONS)
    assert cordoned.healthy and "cordoned" in cordoned.unschedulable
    tainted = node_info(
        node(taints=[{"key": "team", "value": "a", "effect": "NoSchedule"}]), OPTIONS
    )
    assert tainted.healthy and tainted.unschedulable == "taint team=a:NoSchedule is not tolerated"
    gpu_taint = node(taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    assert node_info(gpu_taint, OPTIONS).unschedulable == ""  # kiban's pods tolerate it
    soft = node(taints=[{"key": "team", "effect": "PreferNoSchedule"}])
    assert node_info(soft, OPTIONS).unschedulable == ""


def pod(
    node_name: str, gpus: int, *, kiban: bool = False, phase: str = "Running"
) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": "kiban"} if kiban else {}
    return {
        "metadata": {"labels": labels},
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def test_gpus_of_live_pods_kiban_did_not_create_are_counted_per_node() -> None:
    pods = [
        pod("a", 2),
        pod("a", 1),
        pod("b", 4, kiban=True),
        pod("b", 8, phase="Succeeded"),
        pod("c", 0),
    ]
    assert foreign_gpus(pods) == {"a": 3}


def test_the_node_agents_failing_checks_make_a_node_unhealthy_by_default() -> None:
    from kiban.health.checks import CHECKS
    from kiban.health.conditions import WARNING_ONLY

    for check in CHECKS:
        sick = node(conditions=[{"type": check.value, "status": "True", "reason": "X"}])
        assert node_info(sick, KubernetesOptions()).healthy is (check in WARNING_ONLY), check


def test_extended_resources_come_from_allocatable() -> None:
    dgx = node()
    dgx["status"]["allocatable"].update(
        {
            "nvidia.com/hostdev": "8",
            "nvidia-dgx-h100/nic0": "1",
            "nvidia.com/mig-1g.10gb": "7",
            "hugepages-2Mi": "2Gi",
            "hugepages-1Gi": "0",  # none reserved: left out
            "ephemeral-storage": "100Gi",  # not an extended resource
            "pods": "110",
            "rdma/hca": "lots",  # unreadable: left out, with a warning
        }
    )
    assert node_info(dgx, OPTIONS).extended == {
        "nvidia.com/hostdev": 8,
        "nvidia-dgx-h100/nic0": 1,
        "nvidia.com/mig-1g.10gb": 7,
        "hugepages-2Mi": 2 * 2**30,
    }
    assert node_info(node(), OPTIONS).extended == {}  # GPUs, CPU and memory are not extended
