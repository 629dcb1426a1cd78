"""An MPI job straight on the local executor (no control plane): the launcher holding ranks too
(``runLauncherAsWorker``), the hostfile kiban wrote, each rank with its replica's GPUs, and what
the worker's own command becomes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import LaunchRequest, ReplicaRef
from kiban.executors.local import LocalExecutor
from kiban.executors.local.nodes import virtual_nodes
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.testing import eventually

pytestmark = pytest.mark.skipif(
    shutil.which("mpirun") is None or shutil.which("orted") is None,
    reason="needs Open MPI (scripts/ensure-openmpi.sh installs openmpi-bin)",
)

RANKS = (
    "from mpi4py import MPI; import os; c = MPI.COMM_WORLD; "
    "print('RANK', c.rank, c.allreduce(1), os.environ['KIBAN_MPI_HOST'], "
    "repr(os.environ['CUDA_VISIBLE_DEVICES']), flush=True)"
)


def test_the_launcher_holds_ranks_too_when_asked(tmp_path: Path) -> None:
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "lw"},
        "spec": {
            "launcher": "mpirun",
            "mpi": {"runLauncherAsWorker": True, "slotsPerWorker": 1},
            "tasks": [
                {"name": "launcher", "command": ["mpirun", "-n", "2", "python3", "-c", RANKS]},
                {
                    "name": "worker",
                    "replicas": 1,
                    "resources": {"gpu": 2},
                    "command": ["no-such-sshd", "-De"],
                },
            ],
        },
    }
    spec = parse_job_manifest(document).spec
    executor = LocalExecutor(tmp_path / "home", virtual_nodes(2, 2))
    placements = (
        ReplicaPlacement("launcher", 0, 0, "node-0", (), 100, 2**26),
        ReplicaPlacement("worker", 0, 1, "node-1", (0, 1), 100, 2**26),
    )
    launched = executor.launch(LaunchRequest("lw-1", "lw", "t", 1, spec, placements, 29500))
    refs = [
        ReplicaRef("lw-1", 1, p.task, p.index, p.rank, up.handle)
        for p, up in zip(placements, launched, strict=True)
    ]
    try:
        eventually(
            lambda: not any(executor.observe(r).running for r in refs),
            what="the job to end",
            timeout=120,
        )
        log = (tmp_path / "home" / "jobs" / "lw-1" / "rank-0.log").read_text()
        assert [executor.observe(r).exit_code for r in refs] == [0, 0], log
        ranks = sorted(line.split()[1:] for line in log.splitlines() if line.startswith("RANK"))
        # each rank in its replica, with that replica's GPUs (the launcher has none)
        assert ranks == [
            ["0", "2", "lw-launcher-0", "''"],
            ["1", "2", "lw-worker-0", "'0,1'"],
        ], log
        hostfile = tmp_path / "home" / "jobs" / "lw-1" / "attempt-1" / "mpi" / "hostfile"
        assert hostfile.read_text() == "lw-launcher-0 slots=1\nlw-worker-0 slots=1\n"
        # the worker ran kiban's agent, not its own (absent) command
        worker_log = (tmp_path / "home" / "jobs" / "lw-1" / "rank-1.log").read_text()
        assert "MPI worker agent for lw-worker-0 is up" in worker_log
    finally:
        for ref in refs:
            executor.stop(ref, force=True)
