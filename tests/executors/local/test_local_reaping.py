"""The local executor reaps every replica process it started: none is left a zombie."""

from __future__ import annotations

from pathlib import Path

import psutil

from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import LaunchRequest, ReplicaRef
from kiban.executors.local import LocalExecutor
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.testing import eventually

JOBS = 30


def launch(executor: LocalExecutor, workdir: Path, job_id: str, command: list[str]) -> ReplicaRef:
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "short"},
        "spec": {"tasks": [{"command": command}], "workingDir": str(workdir)},
    }
    spec = parse_job_manifest(document).spec
    placement = ReplicaPlacement("worker", 0, 0, "node-0", (), 1000, 2**30)
    (up,) = executor.launch(LaunchRequest(job_id, "short", "t", 1, spec, (placement,), 29500))
    return ReplicaRef(job_id, 1, "worker", 0, 0, up.handle)


def zombies(pids: set[int]) -> list[int]:
    """Which of ``pids`` are this process's children, exited and not waited for."""
    found = []
    for child in psutil.Process().children():
        try:
            if child.pid in pids and child.status() == psutil.STATUS_ZOMBIE:
                found.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def test_no_replica_is_left_a_zombie_after_many_short_jobs(tmp_path: Path) -> None:
    """Each replica is observed as settling does: until its exit is recorded, then never
    again. The shim records the exit just before it exits, so a replica is usually settled
    while its process still runs; it used to be checked that once and never reaped (63
    zombies after 115 jobs)."""
    executor = LocalExecutor(tmp_path / "home", [])
    refs = [launch(executor, tmp_path, f"short-{n:03d}", ["true"]) for n in range(JOBS)]
    try:
        for ref in refs:
            eventually(  # polling, as the control loop does
                lambda ref=ref: not executor.observe(ref).running,
                what=f"{ref.job_id} to end",
                timeout=60,
                interval=0.005,
            )
            assert executor.observe(ref).exit_code == 0
        pids = {int(ref.handle.split()[0]) for ref in refs if ref.handle is not None}
        eventually(
            lambda: not zombies(pids),
            what=f"every one of the {JOBS} replicas to be reaped (none left a zombie)",
            timeout=20,
        )
    finally:
        for ref in refs:
            executor.stop(ref, force=True)
        executor.close()
