"""``kiban dev kube up`` and ``down`` as a user runs them, in a subprocess of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from kiban.devtools.kube import find_binaries
from kiban.devtools.kube.binaries import ENSURE_HINT
from kiban.devtools.kube.fakenodes import ISLAND_LABEL, LOCAL_BLOCK_LABEL

pytestmark = pytest.mark.kube


def kiban(*args: str | Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiban.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def processes_using(directory: Path) -> list[psutil.Process]:
    """Live processes whose command line names a path inside directory."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(str(directory) in arg for arg in process.info["cmdline"] or []):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_up_writes_a_usable_kubeconfig_and_down_stops_everything(tmp_path: Path) -> None:
    if find_binaries() is None:
        pytest.skip(f"Kubernetes control plane binaries not found; {ENSURE_HINT}")
    directory = tmp_path / "cluster"
    nodes = ["--nodes", "4", "--gpus-per-node", "8"]
    labels = ["--label", "team=vision", "--topology", "2x1x2"]
    up = kiban("dev", "kube", "up", "--dir", directory, *nodes, *labels)
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = directory / "kubeconfig"
        assert up.stdout.strip() == f"export KUBECONFIG={kubeconfig}"
        assert kubeconfig.stat().st_mode & 0o077 == 0
        assert len(processes_using(directory)) == 3  # etcd, kube-apiserver, kwok

        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            nodes = client.CoreV1Api(api_client).list_node().items
        finally:
            api_client.close()
        assert len(nodes) == 4
        assert all(n.status.allocatable["nvidia.com/gpu"] == "8" for n in nodes)
        assert all(n.metadata.labels["team"] == "vision" for n in nodes)
        assert {n.metadata.labels[ISLAND_LABEL] for n in nodes} == {"island-0", "island-1"}
        assert len({n.metadata.labels[LOCAL_BLOCK_LABEL] for n in nodes}) == 4

        again = kiban("dev", "kube", "up", "--dir", directory)
        assert again.returncode == 1
        assert "already running" in again.stderr
        assert "Traceback" not in again.stderr
    finally:
        down = kiban("dev", "kube", "down", "--dir", directory)
    assert down.returncode == 0, down.stderr
    assert "stopped kwok, kube-apiserver, etcd" in down.stderr
    assert processes_using(directory) == []
    assert list((directory / "run").glob("*.pid")) == []
    assert (directory / "logs" / "kube-apiserver.log").exists()

    twice = kiban("dev", "kube", "down", "--dir", directory)
    assert twice.returncode == 0
    assert "nothing was running" in twice.stderr
