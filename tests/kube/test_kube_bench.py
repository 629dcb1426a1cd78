"""``kiban bench kube`` at a tiny size on a control plane of its own: every phase runs all of its
pods, and the report holds together (keys, positive rates, ratios from its own figures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kiban.devtools.kube import find_binaries
from kiban.devtools.kube.binaries import ENSURE_HINT, bin_dir

pytestmark = pytest.mark.kube

PHASES = ("raw", "kube_scheduler", "kube_scheduler_backlog", "kiban_gang", "kiban_jobs")


def test_kiban_bench_kube_json_report_is_consistent() -> None:
    if find_binaries() is None:
        pytest.skip(f"Kubernetes control plane binaries not found in {bin_dir()}; {ENSURE_HINT}")
    argv = [sys.executable, "-m", "kiban.cli.main", "bench", "kube", "--json"]
    argv += ["--nodes", "10", "--pods", "20", "--gpus-per-pod", "4", "--timeout", "120"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert "kiban bench kube" in done.stderr  # the table, on stderr with --json

    for key in ("kiban_pods_per_s", "raw_create_pods_per_s", "kube_scheduler_pods_per_s"):
        assert report[key] > 0, key
    for phase in PHASES:
        entry = report[phase]
        assert entry["pods"] == entry["pods_running"] == 20, phase
        assert entry["pods_on_fake_nodes"], phase
        assert {"this process", "kube-apiserver", "etcd", "kwok"} <= set(entry["cpu_ms_per_pod"])
        assert entry["pods_per_s"] == pytest.approx(20 / entry["seconds"], rel=0.01), phase
        assert 0 <= entry["first_created_s"] <= entry["last_created_s"]
        if phase != "kube_scheduler_backlog":  # timed from its first bind, after the creations
            assert entry["last_created_s"] <= entry["seconds"]
    assert report["kiban_gang"]["jobs"] == 1 and report["kiban_jobs"]["jobs"] == 20
    assert report["kiban_pods_per_s"] == min(
        report["kiban_gang"]["pods_per_s"], report["kiban_jobs"]["pods_per_s"]
    )
    assert report["kiban_vs_raw"] == pytest.approx(
        report["kiban_pods_per_s"] / report["raw_create_pods_per_s"], abs=0.001
    )
    assert set(report["goals_met"]) == {"kiban_vs_raw", "kiban_vs_kube_scheduler"}
    assert report["settings"]["nodes"] == 10
    assert {"etcd", "kube-apiserver", "kwok"} <= set(report["settings"]["control_plane_rss_mb"])
    assert report["machine"]["cores"] >= 1
