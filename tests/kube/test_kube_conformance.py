"""The Kubernetes executor passes the executor conformance suite, against the real API server
and KWOK's simulated nodes (pods run, end and print nothing as their annotations say)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_platform import empty_the_cluster

from kiban.devtools.kube import ControlPlane
from kiban.devtools.kube.stages import SIM_DURATION_ANNOTATION, SIM_EXIT_CODE_ANNOTATION
from kiban.executors.base import LaunchRequest
from kiban.executors.kubernetes import KubernetesExecutor, KubernetesOptions, connect
from kiban.testing.conformance import ConformanceTarget, ExecutorConformance, Work

pytestmark = pytest.mark.kube

OPTIONS = KubernetesOptions(default_image="registry.example/train:1", node_sync_s=0.2)


class KubeTarget:
    """The Kubernetes executor; a replica's pod runs until deleted, or ends after a second
    with the work's exit code (KWOK's stages)."""

    patience_s = 60.0
    prints = False  # KWOK's nodes serve no logs
    lists_attempts = True

    def __init__(self, plane: ControlPlane, log_dir: Path) -> None:
        self.kube = KubernetesExecutor(connect(plane.kubeconfig), OPTIONS, log_dir=log_dir)
        self.executor = self.kube

    def task(self, work: Work) -> dict[str, Any]:
        if work.exit_code is None:
            return {"command": ["serve"]}
        annotations = {SIM_DURATION_ANNOTATION: "1s"}
        if work.exit_code != 0:
            annotations[SIM_EXIT_CODE_ANNOTATION] = str(work.exit_code)
        return {"command": ["train"], "annotations": annotations}

    def started(self, request: LaunchRequest, work: Work) -> None:
        pass  # the simulated nodes run the pods

    def write_checkpoint(self, job_id: str) -> float:
        raise AssertionError("the Kubernetes executor declares no checkpoint probe")


class TestKubernetesExecutor(ExecutorConformance):
    @pytest.fixture
    def target(
        self, control_plane: ControlPlane, core: Any, tmp_path: Path
    ) -> Iterator[ConformanceTarget]:
        empty_the_cluster(core)
        target = KubeTarget(control_plane, tmp_path / "pod-logs")
        yield target
        target.kube.close()
        empty_the_cluster(core)
