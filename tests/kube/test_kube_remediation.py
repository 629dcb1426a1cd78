"""Remediation's taint action on the real API server: the Kubernetes executor offers node
taints, puts the rule's taint on the Node, and the tainted node gets nothing new."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_platform import empty_the_cluster, get, job_pods, kube_platform, manifest, node_row
from kube_platform import submit as submit_job
from kube_support import eventually

from kiban.devtools.kube import ControlPlane
from kiban.health.conditions import CheckType
from kiban.platform import Platform
from kiban.services import node_health, remediation
from kiban.services.policy import apply_policy
from kiban.testing.health_reports import health_report

pytestmark = pytest.mark.kube

NODES = ["kwok-node-0000", "kwok-node-0001", "kwok-node-0002"]
TAINT_KEY = "kiban.dev/gpu-pcie"


@pytest.fixture
def platform(control_plane: ControlPlane, core: Any, tmp_path: Path) -> Iterator[Platform]:
    empty_the_cluster(core)
    with kube_platform(control_plane, tmp_path / "home") as built:
        yield built
    empty_the_cluster(core)


def _untaint(core: Any, node: str) -> None:
    taints = core.read_node(node).spec.taints or []
    kept = [
        {"key": t.key, "value": t.value, "effect": t.effect} for t in taints if t.key != TAINT_KEY
    ]
    core.patch_node(node, {"spec": {"taints": kept}})


def test_a_taint_rule_taints_the_node_and_it_gets_nothing_new(
    platform: Platform, core: Any
) -> None:
    assert platform.executor.offers.taints is not None
    rule = {
        "name": "pcie-taint",
        "condition": "GpuPcie",
        "action": "taint",
        "taint": {"key": TAINT_KEY, "value": "degraded", "effect": "NoSchedule"},
    }
    now = platform.clock.now()
    with platform.sessions() as session:
        apply_policy(session, {"health": {"rules": [rule]}}, "test", now)
        session.commit()
    platform.refresh_policy()
    bad = NODES[0]
    report = health_report(bad, now, {CheckType.GPU_PCIE: "GPU 0 PCIe gen3 x8 of gen5 x16"})
    try:
        with platform.sessions() as session:
            node_health.ingest(session, bad, report, now)
            session.commit()
            done = remediation.remediate(session, platform.policy.health, [bad], now)
        remediation.carry_out(
            platform.sessions, done.work, platform.executor.offers.taints, platform.clock.now
        )
        taints = core.read_node(bad).spec.taints or []
        assert [(t.key, t.value, t.effect) for t in taints if t.key == TAINT_KEY] == [
            (TAINT_KEY, "degraded", "NoSchedule")
        ]
        eventually(
            lambda: TAINT_KEY in node_row(platform, bad).unschedulable_reason,
            what="the tainted node seen as taking no new work",
        )
        jobs = [submit_job(platform, manifest(f"after-{i}", replicas=1)) for i in range(2)]
        for job_id in jobs:
            eventually(lambda j=job_id: get(platform, j).state == "Running", what="it runs")
            (pod,) = job_pods(core, job_id)
            assert pod.spec.node_name != bad
    finally:
        _untaint(core, bad)
