"""What an MPI job's launcher needs, on any executor: the hostfile, its variables, the hosts.

Pure functions of the job's spec and where its worker replicas run. The implementation only
changes syntax and names (the Kubeflow MPI Operator sets the same variables):

============  ===================  ==========================================================
flavor        hostfile line        hostfile and remote-start program
============  ===================  ==========================================================
OpenMPI       ``host slots=N``     ``OMPI_MCA_orte_default_hostfile`` (4.x),
                                   ``PRTE_MCA_prte_default_hostfile`` (5.x);
                                   ``OMPI_MCA_plm_rsh_agent`` / ``PRTE_MCA_plm_ssh_agent``
MPICH         ``host:N``           ``HYDRA_HOST_FILE``; ``HYDRA_LAUNCHER=rsh`` and
                                   ``HYDRA_LAUNCHER_EXEC`` (and ``HYDRA_ENV=none``)
Intel MPI     ``host:N``           ``I_MPI_HYDRA_HOST_FILE``; ``I_MPI_HYDRA_BOOTSTRAP=rsh``
                                   and ``I_MPI_HYDRA_BOOTSTRAP_EXEC``
============  ===================  ==========================================================

OpenMPI refuses to run as root unless told twice (``OMPI_ALLOW_RUN_AS_ROOT`` and
``..._CONFIRM``): set only when the launcher does run as root. With a remote-start program of
its own (``rsh_agent``), OpenMPI is also told to keep its daemons attached (not
``--daemonize``, which would leave the process group the executor stops) and to start every
daemon from the launcher (no tree spawn: a worker never starts another's). Checked against
Open MPI 4.1 (Debian's); the ``PRTE_MCA_*`` names of 5.x are set alike but untried here.

MPICH's Hydra passes the launcher's whole environment to every rank by default, so ranks
started through kiban's agent would take the launcher replica's ``KIBAN_*`` and
``CUDA_VISIBLE_DEVICES`` over their worker's: with a remote-start program of kiban's it is told
``HYDRA_ENV=none`` (``-genvnone``), and ranks keep their worker's environment as under Open MPI
(``-genv NAME VALUE`` still passes a variable). Found by running Debian's MPICH 4.0; Intel MPI
is unchanged and untried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kiban.domain.jobspec import JobSpec, TaskSpec
from kiban.domain.mpi import MpiImplementation, MpiSpec


@dataclass(frozen=True)
class MpiHost:
    """One line of the hostfile: a worker replica's host name and its slots."""

    name: str
    slots: int


def mpi_spec(spec: JobSpec) -> MpiSpec:
    """The job's ``spec.mpi``, its defaults when absent."""
    return spec.mpi or MpiSpec()


def worker_task(spec: JobSpec) -> TaskSpec | None:
    """The task whose replicas hold the ranks (None: the launcher runs them itself)."""
    mpi = mpi_spec(spec)
    return next((t for t in spec.tasks if t.name == mpi.worker_task), None)


def launcher_task(spec: JobSpec) -> TaskSpec:
    """The task whose one replica runs ``mpirun`` (checked present when the spec was read)."""
    mpi = mpi_spec(spec)
    return next(t for t in spec.tasks if t.name == mpi.launcher_task)


def slots_per_worker(spec: JobSpec) -> int:
    """``slotsPerWorker``, else the worker's GPUs, else 1."""
    mpi = mpi_spec(spec)
    if mpi.slots_per_worker is not None:
        return mpi.slots_per_worker
    task = worker_task(spec) or launcher_task(spec)
    return task.resources.gpu or 1


def host_name(job_name: str, task: str, index: int) -> str:
    """A replica's host name as the MPI Operator names its pods: ``<job>-<task>-<index>``."""
    return f"{job_name}-{task}-{index}"


def mpi_hosts(spec: JobSpec, job_name: str) -> list[MpiHost]:
    """The hostfile's hosts in order: each worker replica (and the launcher first when it runs
    ranks too, ``runLauncherAsWorker``)."""
    mpi = mpi_spec(spec)
    slots = slots_per_worker(spec)
    hosts = []
    if mpi.run_launcher_as_worker:
        hosts.append(MpiHost(host_name(job_name, mpi.launcher_task, 0), slots))
    worker = worker_task(spec)
    if worker is not None:
        hosts += [
            MpiHost(host_name(job_name, worker.name, i), slots) for i in range(worker.replicas)
        ]
    return hosts


def hostfile_text(implementation: MpiImplementation, hosts: Sequence[MpiHost]) -> str:
    """The hostfile, one line per host with its slots, in the implementation's syntax."""
    if implementation is MpiImplementation.OPEN_MPI:
        lines = [f"{h.name} slots={h.slots}" for h in hosts]
    else:  # MPICH's and Intel MPI's Hydra
        lines = [f"{h.name}:{h.slots}" for h in hosts]
    return "".join(f"{line}\n" for line in lines)


def launcher_environment(
    implementation: MpiImplementation,
    hostfile: str,
    *,
    rsh_agent: Sequence[str] | None = None,
    as_root: bool = False,
) -> dict[str, str]:
    """The launcher's variables: where the hostfile is, and (``rsh_agent``) the program that
    starts a process on a host in place of ssh, called as ``AGENT HOST COMMAND...``.

    OpenMPI splits its agent at spaces, so no word of it may hold one; Hydra takes one program.
    ValueError (naming the word) otherwise.
    """
    env: dict[str, str] = {}
    if implementation is MpiImplementation.OPEN_MPI:
        env["OMPI_MCA_orte_default_hostfile"] = hostfile
        env["PRTE_MCA_prte_default_hostfile"] = hostfile
        env["OMPI_MCA_orte_keep_fqdn_hostnames"] = "true"
        # Open MPI 4.1's daemons share their hwloc topology through a mapping at the address of
        # the "biggest" hole in mpirun's address space; an orted whose own stack or libraries sit
        # there dies in hwloc_shmem_topology_write (SIGSEGV, seen in CI). "none" turns the
        # sharing, a memory saving only, off (rtc_hwloc_component.c's ``vmhole`` parameter).
        env["OMPI_MCA_rtc_hwloc_vmhole"] = "none"
        if rsh_agent is not None:
            spaced = [word for word in rsh_agent if not word or any(c.isspace() for c in word)]
            if spaced or not rsh_agent:
                message = f"the MPI remote-start program has a blank or spaced word: {spaced}"
                raise ValueError(message)
            agent = " ".join(rsh_agent)
            env["OMPI_MCA_plm_rsh_agent"] = agent
            env["PRTE_MCA_plm_ssh_agent"] = agent
            env["OMPI_MCA_plm_rsh_no_tree_spawn"] = "1"
            env["PRTE_MCA_plm_ssh_no_tree_spawn"] = "1"
            env["OMPI_MCA_orte_leave_session_attached"] = "1"
            env["PRTE_MCA_prte_leave_session_attached"] = "1"
        if as_root:
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        return env
    prefix = "HYDRA_" if implementation is MpiImplementation.MPICH else "I_MPI_HYDRA_"
    env[f"{prefix}HOST_FILE"] = hostfile
    if rsh_agent is not None:
        if len(rsh_agent) != 1 or not rsh_agent[0]:
            words = list(rsh_agent)
            flavor = implementation.value
            raise ValueError(f"{flavor}'s remote-start program is one program: {words}")
        if implementation is MpiImplementation.MPICH:
            env["HYDRA_LAUNCHER"] = "rsh"
            env["HYDRA_LAUNCHER_EXEC"] = rsh_agent[0]
            env["HYDRA_ENV"] = "none"
        else:
            env["I_MPI_HYDRA_BOOTSTRAP"] = "rsh"
            env["I_MPI_HYDRA_BOOTSTRAP_EXEC"] = rsh_agent[0]
    return env
