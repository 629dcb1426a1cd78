"""The KWOK stages kiban ships, and the pinned versions of the control plane's binaries."""

from __future__ import annotations

import re
from pathlib import Path

from kiban.devtools.kube import binaries
from kiban.devtools.kube.stages import (
    SIM_DURATION_ANNOTATION,
    SIM_EXIT_CODE_ANNOTATION,
    load_stages,
    stage_files,
)

REPO = Path(__file__).resolve().parents[2]


def test_every_stage_is_a_kwok_stage_with_a_unique_name() -> None:
    stages = load_stages()
    names = [s["metadata"]["name"] for s in stages]
    assert sorted(names) == [
        "node-heartbeat",
        "node-initialize",
        "pod-complete",
        "pod-delete",
        "pod-fail",
        "pod-ready",
        "pod-restart",
    ]
    assert len(stage_files()) == len(stages)
    for stage in stages:
        assert stage["apiVersion"] == "kwok.x-k8s.io/v1alpha1"
        assert stage["kind"] == "Stage"
        assert stage["spec"]["resourceRef"]["kind"] in ("Node", "Pod")
        assert stage["spec"]["steps"], stage["metadata"]["name"]
        assert "next" not in stage["spec"]  # the deprecated form


def test_completion_stages_have_no_jitter_and_read_the_annotations() -> None:
    stages = {s["metadata"]["name"]: s["spec"] for s in load_stages()}
    for name in ("pod-complete", "pod-fail", "pod-restart"):
        delay = stages[name]["delay"]
        assert "jitterDurationMilliseconds" not in delay
        assert "jitterDurationFrom" not in delay
        assert SIM_DURATION_ANNOTATION in delay["durationFrom"]["jq"]["expression"]
    assert SIM_EXIT_CODE_ANNOTATION in stages["pod-fail"]["steps"][0]["patch"]["template"]


def test_pinned_versions_match_the_wrapper_modules() -> None:
    modules = REPO / "deploy" / "kube-build"

    def required(module_dir: str, module: str) -> str:
        text = (modules / module_dir / "go.mod").read_text()
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", text, re.MULTILINE)
        assert match, f"{module} not required in {module_dir}/go.mod"
        return match.group(1)

    assert required("kubernetes", "k8s.io/kubernetes") == binaries.KUBERNETES_VERSION
    assert required("etcd", "go.etcd.io/etcd/server/v3") == binaries.ETCD_VERSION
    assert required("kwok", "sigs.k8s.io/kwok") == binaries.KWOK_VERSION
    staging = re.findall(
        r"^\s*(k8s\.io/\S+) => \1 (v\S+)$",
        (modules / "kubernetes" / "go.mod").read_text(),
        re.MULTILINE,
    )
    assert len(staging) > 20
    minor = binaries.KUBERNETES_VERSION.replace("v1.", "v0.", 1)
    assert {version for _, version in staging} == {minor}
