"""The job's hosts by task, as Volcano's ``svc`` plugin gives them (``spec.hostsFiles``).

Volcano's svc plugin (docs/user-guide/how_to_use_svc_plugin.md and
pkg/controllers/job/plugins/svc/svc.go in volcano-sh/volcano) makes, for each task, a file
``<task>.host`` (one host per replica, one per line, no newline at the end) and the variables
``VC_<TASK>_HOSTS`` (the hosts joined by commas) and ``VC_<TASK>_NUM`` (how many), where
``<task>`` has each ``-`` made ``_`` and is upper-cased in the variables' names. It keeps them
in a ConfigMap ``<job>-svc`` mounted at ``/etc/volcano`` and gives every container the
variables. A host there is ``<pod>.<job>`` (the pod's name under the job's headless Service).

kiban gives the same names and formats; the hosts are what reach the replica on each executor
(the pod's name under the attempt's Service on Kubernetes; on the local executor the replica's
host name, ``<job>-<task>-<i>``, the name an MPI job's hostfile and kiban's MPI agents use).
"""

from __future__ import annotations

from collections.abc import Callable

from kiban.domain.jobspec import JobSpec

MOUNT = "/etc/volcano"
"""Where Volcano mounts the hosts files (the Kubernetes executor mounts them there too)."""
DIR_ENV = "KIBAN_HOSTS_DIR"
"""The directory of the hosts files, given to every replica (``/etc/volcano`` on Kubernetes;
the attempt's own directory on the local executor, where ``/etc/volcano`` is shared by every
job on the host and, as a user, cannot be written)."""


def _key(task: str) -> str:
    return task.replace("-", "_")


def hosts_data(spec: JobSpec, host_of: Callable[[str, int], str]) -> dict[str, str]:
    """The files and variables of a job whose replica ``i`` of task ``t`` is ``host_of(t, i)``:
    ``{"<task>.host": ..., "VC_<TASK>_HOSTS": ..., "VC_<TASK>_NUM": ...}`` for each task."""
    data: dict[str, str] = {}
    for task in spec.tasks:
        hosts = [host_of(task.name, i) for i in range(task.replicas)]
        key = _key(task.name)
        data[f"{key}.host"] = "\n".join(hosts)
        data[f"VC_{key.upper()}_HOSTS"] = ",".join(hosts)
        data[f"VC_{key.upper()}_NUM"] = str(len(hosts))
    return data


def hosts_env(data: dict[str, str]) -> dict[str, str]:
    """The variables of ``hosts_data`` (not its files)."""
    return {name: value for name, value in data.items() if name.startswith("VC_")}


def hosts_files(data: dict[str, str]) -> dict[str, str]:
    """The files of ``hosts_data``: file name to content."""
    return {name: value for name, value in data.items() if name.endswith(".host")}
