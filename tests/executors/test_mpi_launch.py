"""What an MPI job's launcher is given, per implementation: hostfile lines, slots, variables."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.jobspec import JobSpec
from kiban.domain.manifests import parse_job_manifest
from kiban.domain.mpi import MpiImplementation
from kiban.executors.mpi_launch import (
    MpiHost,
    hostfile_text,
    launcher_environment,
    mpi_hosts,
    slots_per_worker,
)

OPEN_MPI, MPICH = MpiImplementation.OPEN_MPI, MpiImplementation.MPICH
INTEL = MpiImplementation.INTEL


def mpi_spec(workers: int = 2, gpu: int = 0, **mpi: Any) -> JobSpec:
    tasks: list[dict[str, Any]] = [{"name": "launcher", "command": ["mpirun", "hostname"]}]
    if workers:
        tasks.append(
            {"name": "worker", "replicas": workers, "resources": {"gpu": gpu}, "command": ["x"]}
        )
    spec: dict[str, Any] = {"launcher": "mpirun", "tasks": tasks}
    if mpi:
        spec["mpi"] = mpi
    document = {"apiVersion": "kiban/v1", "kind": "Job", "metadata": {"name": "m"}, "spec": spec}
    return parse_job_manifest(document).spec


@pytest.mark.parametrize(
    ("spec", "slots"),
    [
        (mpi_spec(), 1),  # no GPUs: one slot
        (mpi_spec(gpu=8), 8),  # the worker's GPUs
        (mpi_spec(gpu=8, slotsPerWorker=2), 2),  # asked for, within the GPUs
        (mpi_spec(slotsPerWorker=16), 16),  # no GPUs to bind them: any number
    ],
    ids=["default-1", "gpus", "asked", "cpu-only-asked"],
)
def test_slots_per_worker(spec: JobSpec, slots: int) -> None:
    assert slots_per_worker(spec) == slots


@pytest.mark.parametrize(
    ("spec", "hosts"),
    [
        (mpi_spec(workers=3, gpu=4), [("m-worker-0", 4), ("m-worker-1", 4), ("m-worker-2", 4)]),
        (
            mpi_spec(workers=1, runLauncherAsWorker=True),
            [("m-launcher-0", 1), ("m-worker-0", 1)],
        ),
        (mpi_spec(workers=0, runLauncherAsWorker=True, slotsPerWorker=3), [("m-launcher-0", 3)]),
    ],
    ids=["workers", "launcher-as-worker-first", "launcher-only"],
)
def test_hosts_are_the_worker_replicas_in_order(
    spec: JobSpec, hosts: list[tuple[str, int]]
) -> None:
    assert mpi_hosts(spec, "m") == [MpiHost(name, slots) for name, slots in hosts]


@pytest.mark.parametrize(
    ("implementation", "text"),
    [
        (OPEN_MPI, "a slots=2\nb slots=1\n"),
        (MPICH, "a:2\nb:1\n"),
        (INTEL, "a:2\nb:1\n"),
    ],
)
def test_hostfile_syntax_per_implementation(implementation: MpiImplementation, text: str) -> None:
    assert hostfile_text(implementation, [MpiHost("a", 2), MpiHost("b", 1)]) == text


AGENT = ["/run/job/mpi-rsh"]


@pytest.mark.parametrize(
    ("implementation", "agent", "as_root", "expected", "absent"),
    [
        (
            OPEN_MPI,
            AGENT,
            False,
            {
                "OMPI_MCA_orte_default_hostfile": "/h",
                "PRTE_MCA_prte_default_hostfile": "/h",
                "OMPI_MCA_plm_rsh_agent": "/run/job/mpi-rsh",
                "PRTE_MCA_plm_ssh_agent": "/run/job/mpi-rsh",
                "OMPI_MCA_plm_rsh_no_tree_spawn": "1",
                "OMPI_MCA_orte_leave_session_attached": "1",
                "OMPI_MCA_rtc_hwloc_vmhole": "none",  # orted's topology sharing segfaults
            },
            ["OMPI_ALLOW_RUN_AS_ROOT", "HYDRA_HOST_FILE"],
        ),
        (
            OPEN_MPI,
            ["python", "-P", "-m", "rsh"],
            True,
            {
                "OMPI_MCA_plm_rsh_agent": "python -P -m rsh",
                "OMPI_ALLOW_RUN_AS_ROOT": "1",
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            },
            [],
        ),
        (  # over ssh (Kubernetes): only the hostfile, ssh stays the default
            OPEN_MPI,
            None,
            False,
            {"OMPI_MCA_orte_default_hostfile": "/h"},
            ["OMPI_MCA_plm_rsh_agent", "OMPI_MCA_orte_leave_session_attached"],
        ),
        (
            MPICH,
            AGENT,
            True,
            {
                "HYDRA_HOST_FILE": "/h",
                "HYDRA_LAUNCHER": "rsh",
                "HYDRA_LAUNCHER_EXEC": "/run/job/mpi-rsh",
                "HYDRA_ENV": "none",
            },
            ["OMPI_ALLOW_RUN_AS_ROOT", "OMPI_MCA_orte_default_hostfile", "I_MPI_HYDRA_HOST_FILE"],
        ),
        (
            INTEL,
            AGENT,
            False,
            {
                "I_MPI_HYDRA_HOST_FILE": "/h",
                "I_MPI_HYDRA_BOOTSTRAP": "rsh",
                "I_MPI_HYDRA_BOOTSTRAP_EXEC": "/run/job/mpi-rsh",
            },
            ["HYDRA_HOST_FILE", "HYDRA_LAUNCHER_EXEC"],
        ),
        (MPICH, None, False, {"HYDRA_HOST_FILE": "/h"}, ["HYDRA_LAUNCHER", "HYDRA_ENV"]),
    ],
    ids=["openmpi", "openmpi-root", "openmpi-ssh", "mpich", "intel", "mpich-ssh"],
)
def test_launcher_environment(
    implementation: MpiImplementation,
    agent: list[str] | None,
    as_root: bool,
    expected: dict[str, str],
    absent: list[str],
) -> None:
    env = launcher_environment(implementation, "/h", rsh_agent=agent, as_root=as_root)
    assert {k: env.get(k) for k in expected} == expected
    assert [k for k in absent if k in env] == []


@pytest.mark.parametrize(
    ("implementation", "agent", "message"),
    [
        (OPEN_MPI, ["/my dir/rsh"], "spaced word"),  # OpenMPI splits the agent at spaces
        (OPEN_MPI, [], "spaced word"),
        (MPICH, ["python", "-m", "rsh"], "one program"),  # Hydra takes one program
        (INTEL, [""], "one program"),
    ],
)
def test_a_remote_start_program_the_implementation_cannot_take_is_refused(
    implementation: MpiImplementation, agent: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        launcher_environment(implementation, "/h", rsh_agent=agent)
