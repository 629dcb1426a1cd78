"""MPI jobs: a launcher task that runs ``mpirun`` and worker tasks that hold the ranks.

As the Kubeflow MPI Operator shapes them (``mpiReplicaSpecs.Launcher`` and ``Worker``): the
launcher starts once every worker is up, with a hostfile listing each worker replica with its
``slotsPerWorker`` slots (default: the worker's GPUs, or 1 without GPUs). The implementation
only changes the launcher's flags and variables.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class MpiImplementation(StrEnum):
    """The MPI flavors kiban knows how to launch (the MPI Operator's ``mpiImplementation``)."""

    OPEN_MPI = "OpenMPI"
    MPICH = "MPICH"
    INTEL = "Intel"


class MpiSpec(BaseModel):
    """The ``spec.mpi`` of a Job whose ``launcher`` is ``mpirun``."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, frozen=True)

    implementation: MpiImplementation = MpiImplementation.OPEN_MPI
    slots_per_worker: int | None = Field(default=None, ge=1, le=1024)
    launcher_task: str = "launcher"
    worker_task: str = "worker"
    ssh_auth_mount_path: str = "/root/.ssh"
    run_launcher_as_worker: bool = False
