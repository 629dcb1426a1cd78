"""How the local executor runs an MPI job's replicas (``launcher: mpirun``).

Workers are replicas on virtual nodes, each running kiban's worker agent (``mpi_agent``) in
place of its command (the MPI Operator's workers run sshd, which the agent replaces; the
worker task's own command is not run here). The launcher replica runs its command under
``mpi_launcher``, which waits for every agent, with the hostfile and ``mpi_launch``'s variables,
and ``mpi_rsh`` as the remote-start program (a small script in the job's MPI directory, so that
MPICH and Intel MPI, which take one program, can run it as OpenMPI does).

Each replica keeps its ``KIBAN_*``, ``RANK`` and ``WORLD_SIZE`` (the replica's rank among the
job's replicas, the launcher's first, as for any job); MPI ranks learn theirs from the MPI
library (``OMPI_COMM_WORLD_RANK``/``_SIZE``/``_LOCAL_RANK``, ``PMI_RANK``/``PMI_SIZE``).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from kiban.domain.jobspec import JobSpec
from kiban.executors.mpi_launch import (
    host_name,
    hostfile_text,
    launcher_environment,
    mpi_hosts,
    mpi_spec,
)

SECRET_ENV = "KIBAN_MPI_AGENTS"
"""The attempt's secret: its agents' sockets are named by it (``mpi_agent.agent_address``)."""
HOST_ENV = "KIBAN_MPI_HOST"
"""The replica's host name in the hostfile."""
HOSTS_ENV = "KIBAN_MPI_HOSTS"
"""The launcher's: the hosts it waits for, comma-separated."""
AGENT = ("-P", "-m", "kiban.executors.local.mpi_agent")
LAUNCHER = ("-P", "-m", "kiban.executors.local.mpi_launcher", "--")
RSH_SCRIPT = "mpi-rsh"
HOSTFILE = "hostfile"


@dataclass(frozen=True)
class MpiRun:
    """One attempt's MPI layout: its secret, hosts and files, and what each replica runs."""

    spec: JobSpec
    job_name: str
    python: str
    directory: Path
    secret: str
    as_root: bool

    @classmethod
    def prepare(
        cls, spec: JobSpec, job_name: str, python: str, directory: Path, *, as_root: bool
    ) -> MpiRun:
        """Write the hostfile and the remote-start script into ``directory`` (made before,
        owned by whoever runs the job's replicas)."""
        run = cls(spec, job_name, python, directory, secrets.token_hex(12), as_root)
        mpi = mpi_spec(spec)
        (directory / HOSTFILE).write_text(
            hostfile_text(mpi.implementation, mpi_hosts(spec, job_name))
        )
        script = directory / RSH_SCRIPT
        script.write_text(
            f"#!{python} -P\n"
            "import sys\n"
            "from kiban.executors.local.mpi_rsh import main\n"
            "sys.exit(main(sys.argv[1:]))\n"
        )
        os.chmod(script, 0o755)
        os.chmod(directory / HOSTFILE, 0o644)
        return run

    @property
    def hosts(self) -> list[str]:
        return [h.name for h in mpi_hosts(self.spec, self.job_name)]

    def is_worker(self, task: str) -> bool:
        mpi = mpi_spec(self.spec)
        return task == mpi.worker_task and task != mpi.launcher_task

    def is_launcher(self, task: str) -> bool:
        return task == mpi_spec(self.spec).launcher_task

    def environment(self, task: str, index: int) -> dict[str, str]:
        """The replica's MPI variables (on top of those every replica gets)."""
        env = {SECRET_ENV: self.secret, HOST_ENV: host_name(self.job_name, task, index)}
        if self.is_launcher(task):
            mpi = mpi_spec(self.spec)
            env[HOSTS_ENV] = ",".join(self.hosts)
            env.update(
                launcher_environment(
                    mpi.implementation,
                    str(self.directory / HOSTFILE),
                    rsh_agent=[str(self.directory / RSH_SCRIPT)],
                    as_root=self.as_root,
                )
            )
        return env

    def command(self, task: str, command: list[str]) -> list[str]:
        """What the replica runs: the agent (a worker), or ``command`` under the launcher."""
        if self.is_worker(task):
            return [self.python, *AGENT]
        if self.is_launcher(task):
            return [self.python, *LAUNCHER, *command]
        return command
