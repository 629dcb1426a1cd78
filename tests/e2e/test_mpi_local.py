"""MPI jobs on the local executor, for real: Open MPI's mpirun and orted, mpi4py, kiban's worker
agents in place of sshd, three workers on three virtual nodes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from e2e_support import KibanServer, cancel_leaves_nothing, eventually, job_processes

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("mpirun") is None or shutil.which("orted") is None,
        reason="needs Open MPI (scripts/ensure-openmpi.sh installs openmpi-bin)",
    ),
]

EXAMPLE = Path(__file__).parents[2] / "examples" / "mpi-allreduce.yaml"
MPIJOB_EXAMPLE = Path(__file__).parents[2] / "examples" / "mpijob-allreduce.yaml"

WAITING_ALLREDUCE = """
import os, pathlib, sys, time
from mpi4py import MPI
c = MPI.COMM_WORLD
release = pathlib.Path(sys.argv[1])
sys.stdout.write(f"RANK-UP {c.rank} pid {os.getpid()}\\n")
sys.stdout.flush()
while not c.bcast(release.exists() if c.rank == 0 else None, root=0):
    time.sleep(0.1)
total = c.allreduce(c.rank + 1, op=MPI.SUM)
assert total == c.size * (c.size + 1) // 2, total
sys.stdout.write(f"RANK-OK {c.rank} of {c.size} sum {total}\\n")
sys.stdout.flush()
"""


def mpi_job(name: str, command: list[str], workers: int = 3, **spec: Any) -> dict[str, Any]:
    """A launcher and ``workers`` workers, one per node, as an MPIJob would have them."""
    small = {"cpu": 1, "memory": "256Mi"}
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "launcher": "mpirun",
            "mpi": {"slotsPerWorker": 1},
            "tasks": [
                {"name": "launcher", "resources": small, "command": command},
                {
                    "name": "worker",
                    "replicas": workers,
                    "maxReplicasPerNode": 1,
                    "resources": small,
                    "command": ["/usr/sbin/sshd", "-De"],
                },
            ],
            **spec,
        },
    }


def rank_lines(server: KibanServer, job_id: str, tag: str) -> list[str]:
    return [line for line in server.log_text(job_id, 0).splitlines() if line.startswith(tag)]


def mpi_pids(server: KibanServer, job_id: str) -> set[int]:
    """The job's orted and rank processes (found by the job id they inherit)."""
    ranks = {int(m) for m in re.findall(r"RANK-UP \d+ pid (\d+)", server.log_text(job_id, 0))}
    daemons = {p.pid for p in job_processes(job_id) if p.name() == "orted"}
    return ranks | daemons


def test_allreduce_across_three_workers_on_three_nodes(kiban: KibanServer) -> None:
    """examples/mpi-allreduce.yaml as written: ``mpirun -n 3 python3 -c '...allreduce...'``."""
    job_id = kiban.submit(EXAMPLE.read_text())
    job = kiban.wait_for_state(job_id, "Succeeded", timeout=120)
    log = kiban.log_text(job_id, 0)
    found = re.findall(r"^rank (\d) of 3: allreduce (\d+) on (\S+)$", log, re.MULTILINE)
    assert sorted(rank for rank, _, _ in found) == ["0", "1", "2"], log
    assert {total for _, total, _ in found} == {"6"}  # each rank checked it too (assert)
    # each rank ran in its worker replica, on that worker's node: three nodes
    workers = {r["node"] for r in job["replicas"] if r["task"] == "worker"}
    assert {node for _, _, node in found} == workers
    assert len(workers) == 3
    # the launcher began once every worker's agent answered
    assert log.index("every MPI worker is up") < log.index("rank 0 of 3")


def test_an_mpi_operator_mpijob_runs_unchanged_on_the_local_executor(kiban: KibanServer) -> None:
    """examples/mpijob-allreduce.yaml (kubeflow.org/v2beta1) as written: its image and the
    workers' sshd are Kubernetes' business; here the agents stand in for sshd."""
    job_id = kiban.submit(MPIJOB_EXAMPLE.read_text())
    kiban.wait_for_state(job_id, "Succeeded", timeout=120)
    log = kiban.log_text(job_id, 0)
    found = re.findall(r"^rank (\d) of 3: allreduce (\d+)$", log, re.MULTILINE)
    assert sorted(found) == [("0", "3"), ("1", "3"), ("2", "3")], log


def test_cancel_leaves_no_orted_or_rank_behind(kiban: KibanServer) -> None:
    (kiban.workdir / "wait.py").write_text(WAITING_ALLREDUCE)
    release = kiban.workdir / "never"
    command = ["mpirun", "-n", "3", "python3", "wait.py", str(release)]
    job_id = kiban.submit(mpi_job("mpi-cancel", command, terminationGracePeriod="2s"))
    kiban.wait_for_state(job_id, "Running")
    eventually(
        lambda: len(rank_lines(kiban, job_id, "RANK-UP")) == 3, timeout=120, what="3 ranks up"
    )

    def ranks_and_daemons() -> set[int] | None:
        found = mpi_pids(kiban, job_id)
        return found if len(found) >= 6 else None

    pids = eventually(ranks_and_daemons, timeout=30, what="3 ranks and 3 orted")
    cancel_leaves_nothing(kiban, job_id, pids, "orted or rank")


def test_a_killed_control_plane_readopts_a_running_mpi_job(kiban: KibanServer) -> None:
    (kiban.workdir / "wait.py").write_text(WAITING_ALLREDUCE)
    release = kiban.workdir / "release"
    command = ["mpirun", "-n", "3", "python3", "wait.py", str(release)]
    job_id = kiban.submit(mpi_job("mpi-readopt", command))
    before = kiban.wait_for_state(job_id, "Running")
    eventually(
        lambda: len(rank_lines(kiban, job_id, "RANK-UP")) == 3, timeout=120, what="3 ranks up"
    )

    kiban.kill()  # SIGKILL: the replicas run on, the ranks waiting
    kiban.start()
    probe = kiban.run_job("true")  # a few passes of the new control plane over the MPI job
    kiban.wait_for_state(probe, "Succeeded")
    after = kiban.json("describe", job_id)
    assert after["state"] == "Running", after
    assert after["attempt"] == 1
    assert sorted(r["pid"] for r in after["replicas"]) == sorted(
        r["pid"] for r in before["replicas"]
    )

    release.touch()
    kiban.wait_for_state(job_id, "Succeeded", timeout=120)
    assert len(rank_lines(kiban, job_id, "RANK-OK")) == 3, kiban.log_text(job_id, 0)
