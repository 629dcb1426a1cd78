"""What each replica of a local MPI job runs and is given: the agent for a worker, the launcher's
command under kiban's wait, the hostfile and remote-start script in the job's MPI directory."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from kiban.domain.manifests import parse_job_manifest
from kiban.executors.local.mpi_replicas import HOST_ENV, HOSTS_ENV, SECRET_ENV, MpiRun

PYTHON = sys.executable
MPIRUN = ["mpirun", "-n", "4", "a.out"]


def prepared(tmp_path: Path, *, as_root: bool = False, implementation: str = "OpenMPI") -> MpiRun:
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "m"},
        "spec": {
            "launcher": "mpirun",
            "mpi": {"implementation": implementation},
            "tasks": [
                {"name": "launcher", "command": ["mpirun", "-n", "4"], "args": ["a.out"]},
                {"name": "worker", "replicas": 2, "resources": {"gpu": 2}, "command": ["sshd"]},
                {"name": "sidecar", "command": ["monitor"]},
            ],
        },
    }
    spec = parse_job_manifest(document).spec
    return MpiRun.prepare(spec, "m", PYTHON, tmp_path, as_root=as_root)


@pytest.mark.parametrize(
    ("task", "command", "runs"),
    [
        ("worker", ["sshd"], [PYTHON, "-P", "-m", "kiban.executors.local.mpi_agent"]),
        (
            "launcher",
            ["mpirun", "-n", "4", "a.out"],
            [PYTHON, "-P", "-m", "kiban.executors.local.mpi_launcher", "--", *MPIRUN],
        ),
        ("sidecar", ["monitor"], ["monitor"]),  # a task of neither role runs as it is
    ],
)
def test_what_each_replica_runs(
    tmp_path: Path, task: str, command: list[str], runs: list[str]
) -> None:
    assert prepared(tmp_path).command(task, command) == runs


def test_the_hostfile_and_the_remote_start_script(tmp_path: Path) -> None:
    run = prepared(tmp_path)
    assert (tmp_path / "hostfile").read_text() == "m-worker-0 slots=2\nm-worker-1 slots=2\n"
    script = tmp_path / "mpi-rsh"
    assert script.read_text().startswith(f"#!{PYTHON} -P\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert os.access(script, os.X_OK)
    assert run.hosts == ["m-worker-0", "m-worker-1"]


def test_environments(tmp_path: Path) -> None:
    run = prepared(tmp_path)
    worker = run.environment("worker", 1)
    assert worker == {SECRET_ENV: run.secret, HOST_ENV: "m-worker-1"}
    launcher = run.environment("launcher", 0)
    assert launcher[HOSTS_ENV] == "m-worker-0,m-worker-1"
    assert launcher["OMPI_MCA_plm_rsh_agent"] == str(tmp_path / "mpi-rsh")
    assert launcher["OMPI_MCA_orte_default_hostfile"] == str(tmp_path / "hostfile")
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in launcher
    assert prepared(tmp_path, as_root=True).environment("launcher", 0)["OMPI_ALLOW_RUN_AS_ROOT"]
    # each attempt its own secret: another attempt's agents never answer this one
    assert prepared(tmp_path).secret != run.secret


def test_hydra_flavours_get_their_hostfile_and_launcher(tmp_path: Path) -> None:
    run = prepared(tmp_path, implementation="MPICH")
    assert (tmp_path / "hostfile").read_text() == "m-worker-0:2\nm-worker-1:2\n"
    env = run.environment("launcher", 0)
    assert env["HYDRA_LAUNCHER_EXEC"] == str(tmp_path / "mpi-rsh")
    assert env["HYDRA_HOST_FILE"] == str(tmp_path / "hostfile")
