"""Volcano's svc plugin on the local executor: each attempt's ``<task>.host`` files and the
``VC_<TASK>_*`` variables its replicas get (``kiban.executors.task_hosts`` says what they hold)."""

from __future__ import annotations

import os
from pathlib import Path

from kiban.executors import task_hosts
from kiban.executors.base import LaunchError, LaunchRequest
from kiban.executors.local.isolation import TenantRun
from kiban.executors.mpi_launch import host_name


def write_hosts_files(
    request: LaunchRequest, attempt_dir: Path, tenant: TenantRun | None
) -> dict[str, str]:
    """Volcano's svc plugin (``spec.hostsFiles``): the ``<task>.host`` files in a directory
    of the attempt (``/etc/volcano`` is the host's, shared by every job, and not a user's to
    write), named by ``KIBAN_HOSTS_DIR``; the ``VC_<TASK>_*`` variables to give each replica.
    A replica's host is its name in an MPI hostfile, ``<job>-<task>-<i>``."""
    data = task_hosts.hosts_data(
        request.spec, lambda task, index: host_name(request.job_name, task, index)
    )
    if tenant is None:
        directory = attempt_dir / "hosts"
    else:
        directory = tenant.own("run", request.job_id) / f"hosts-{request.attempt}"
    try:
        directory.mkdir(exist_ok=True)
        for name, text in task_hosts.hosts_files(data).items():
            (directory / name).write_text(text)
            os.chmod(directory / name, 0o644)
        if tenant is not None:
            for path in (directory, *directory.iterdir()):
                os.chown(path, tenant.user.uid, tenant.user.gid, follow_symlinks=False)
    except OSError as exc:
        raise LaunchError(f"could not write the job's hosts files: {exc}") from exc
    return {**task_hosts.hosts_env(data), task_hosts.DIR_ENV: str(directory)}
