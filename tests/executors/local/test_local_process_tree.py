"""A forced stop kills every process under a replica, also those that moved to a process group
of their own (OpenMPI's daemon puts each rank in one): none outlives its job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import LaunchRequest, NodeInfo, ReplicaRef
from kiban.executors.local import LocalExecutor
from kiban.executors.local.process_tree import kill_descendants
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.testing import eventually

ESCAPER = """
import os, signal, sys, time
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)  # a group of its own, as an MPI rank is put in
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
    os._exit(0)
print(pid, flush=True)
time.sleep(600)
"""


def gone(process: psutil.Process) -> bool:
    return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE


def test_a_forced_stop_kills_a_child_in_a_process_group_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "escaper.py").write_text(ESCAPER)
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "escaper"},
        "spec": {
            "tasks": [{"command": ["python", "escaper.py"]}],
            "workingDir": str(tmp_path),
        },
    }
    spec = parse_job_manifest(document).spec
    executor = LocalExecutor(tmp_path / "home", [NodeInfo("node-0", 0, 1000, 2**30)])
    placement = ReplicaPlacement("worker", 0, 0, "node-0", (), 100, 2**26)
    (up,) = executor.launch(LaunchRequest("esc-1", "escaper", "t", 1, spec, (placement,), 29500))
    ref = ReplicaRef("esc-1", 1, "worker", 0, 0, up.handle)
    log = tmp_path / "home" / "jobs" / "esc-1" / "rank-0.log"
    child_pid = eventually(
        lambda: log.read_text().strip() or None, what="the child's pid", timeout=30
    )
    child = psutil.Process(int(child_pid))
    try:
        assert os.getpgid(child.pid) == child.pid  # out of the replica's group
        executor.stop(ref, force=True)
        eventually(lambda: gone(child), what="the child in its own group to be killed", timeout=10)
        eventually(lambda: not executor.group_alive(ref), what="the replica's group", timeout=10)
    finally:
        if not gone(child):
            child.kill()


def test_kill_descendants_leaves_the_root_and_names_what_it_killed() -> None:
    root = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, time; subprocess.Popen(['sleep', '600']); "
            "subprocess.Popen(['sleep', '600']); time.sleep(600)",
        ]
    )
    try:
        sleepers = eventually(
            lambda: (found := psutil.Process(root.pid).children()) and len(found) == 2 and found,
            what="two children",
            timeout=30,
        )
        assert kill_descendants(root.pid) == sorted(p.pid for p in sleepers)
        eventually(lambda: all(gone(p) for p in sleepers), what="both killed", timeout=10)
        assert root.poll() is None
    finally:
        root.kill()
        root.wait()
