"""MPICH jobs on the local executor, for real: Debian's MPICH 4 (Hydra's ``mpirun.mpich`` and
``hydra_pmi_proxy``) with kiban's worker agents as its rsh launcher, three workers on three
virtual nodes, a C program compiled here with ``mpicc.mpich`` (mpi4py is built against Open
MPI, so no Python ranks)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from e2e_support import KibanServer, cancel_leaves_nothing, eventually, job_processes

MPICH_TOOLS = ("mpirun.mpich", "mpicc.mpich", "hydra_pmi_proxy")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        any(shutil.which(tool) is None for tool in MPICH_TOOLS),
        reason="needs MPICH (scripts/ensure-mpich.sh installs mpich)",
    ),
]

ALLREDUCE_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Each rank prints its pid, waits for argv[1] to exist when given, then allreduces rank + 1
   and checks the sum. */
int main(int argc, char **argv) {
    int rank, size, total, go = 0;
    char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *name = getenv("KIBAN_MPI_HOST");
    if (name == NULL) { gethostname(host, sizeof host); name = host; }
    printf("RANK-UP %d pid %d\n", rank, (int)getpid());
    fflush(stdout);
    while (argc > 1 && !go) {
        if (rank == 0) go = access(argv[1], F_OK) == 0;
        MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!go) usleep(100000);
    }
    int mine = rank + 1;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total != size * (size + 1) / 2) {
        fprintf(stderr, "rank %d: allreduce %d is wrong\n", rank, total);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    printf("rank %d of %d: allreduce %d on %s\n", rank, size, total, name);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
"""


def compiled(workdir: Path) -> Path:
    """The allreduce program, built with MPICH's compiler wrapper in the jobs' work dir."""
    source = workdir / "allreduce.c"
    source.write_text(ALLREDUCE_C)
    program = workdir / "allreduce-mpich"
    built = subprocess.run(
        ["mpicc.mpich", "-o", str(program), str(source)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    return program


def mpich_job(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    """A launcher and three workers, one per node, with ``implementation: MPICH``."""
    small = {"cpu": 1, "memory": "256Mi"}
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "launcher": "mpirun",
            "mpi": {"implementation": "MPICH", "slotsPerWorker": 1},
            "tasks": [
                {"name": "launcher", "resources": small, "command": command},
                {
                    "name": "worker",
                    "replicas": 3,
                    "maxReplicasPerNode": 1,
                    "resources": small,
                    "command": ["/usr/sbin/sshd", "-De"],
                },
            ],
            **spec,
        },
    }


def test_an_mpich_allreduce_runs_across_three_workers_on_three_nodes(kiban: KibanServer) -> None:
    program = compiled(kiban.workdir)
    command = ["mpirun.mpich", "-n", "3", str(program)]
    job_id = kiban.submit(mpich_job("mpich-allreduce", command))
    job = kiban.wait_for_state(job_id, "Succeeded", timeout=120)
    log = kiban.log_text(job_id, 0)
    found = re.findall(r"^rank (\d) of 3: allreduce (\d+) on (\S+)$", log, re.MULTILINE)
    assert sorted(rank for rank, _, _ in found) == ["0", "1", "2"], log
    assert {total for _, total, _ in found} == {"6"}  # each rank checked it too
    # one rank in each worker replica (its host name in the hostfile), on three nodes
    workers = [r for r in job["replicas"] if r["task"] == "worker"]
    assert {host for _, _, host in found} == {
        f"{job['name']}-worker-{r['index']}" for r in workers
    }, log
    assert len({r["node"] for r in workers}) == 3
    assert log.index("every MPI worker is up") < log.index("rank 0 of 3")


def test_cancel_leaves_no_hydra_proxy_or_rank_behind(kiban: KibanServer) -> None:
    program = compiled(kiban.workdir)
    release = kiban.workdir / "never"
    command = ["mpiexec.hydra", "-n", "3", str(program), str(release)]
    job_id = kiban.submit(mpich_job("mpich-cancel", command, terminationGracePeriod="2s"))
    kiban.wait_for_state(job_id, "Running")

    def mpich_pids() -> set[int]:
        log = kiban.log_text(job_id, 0)
        ranks = {int(m) for m in re.findall(r"RANK-UP \d+ pid (\d+)", log)}
        proxies = {p.pid for p in job_processes(job_id) if p.name() == "hydra_pmi_proxy"}
        return ranks | proxies if len(ranks) == 3 and len(proxies) >= 3 else set()

    pids = eventually(mpich_pids, timeout=120, what="3 ranks and 3 hydra_pmi_proxy")
    cancel_leaves_nothing(kiban, job_id, pids, "hydra_pmi_proxy or rank")
