"""Volcano's svc plugin on Kubernetes (``spec.hostsFiles``): the attempt's hosts ConfigMap.

As the plugin does (``kiban.executors.task_hosts`` cites it): a ConfigMap ``<service>-svc``
holding each task's ``<task>.host`` file and its ``VC_<TASK>_HOSTS``/``VC_<TASK>_NUM``, mounted
at ``/etc/volcano`` in every pod, whose container gets the variables too (as values: the
plugin refers to the ConfigMap's keys, which comes to the same). A host is the replica's DNS
name under the attempt's headless Service (``localhost`` for a job of one replica, which has
none). Owned by the attempt's Service, deleted by name with the attempt.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from kiban.executors import task_hosts
from kiban.executors.base import LaunchRequest
from kiban.executors.kubernetes.api import CoreApi, Obj
from kiban.executors.kubernetes.mpi_objects import mount, replica_host
from kiban.executors.kubernetes.naming import JOB_ID_ANNOTATION, job_labels, service_name

VOLUME = "volcano-hosts"


def config_map_name(job_id: str, attempt: int) -> str:
    return f"{service_name(job_id, attempt)}-svc"


def has_hosts(pod: Obj) -> bool:
    """Whether a pod mounts its attempt's hosts ConfigMap."""
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any(v.get("name") == VOLUME for v in volumes)


def prepare(
    request: LaunchRequest, bodies: list[Obj], namespace: str, domain: str, alone: bool
) -> Obj | None:
    """The attempt's hosts ConfigMap, and its pod ``bodies`` given the mount and variables;
    None (bodies untouched) unless the job asks for them."""
    if not request.spec.hosts_files:
        return None
    rank_of = {(p.task, p.index): p.rank for p in request.placements}

    def host_of(task: str, index: int) -> str:
        if alone:
            return "localhost"
        rank = rank_of[(task, index)]
        return replica_host(request.job_id, request.attempt, rank, namespace, domain)

    data = task_hosts.hosts_data(request.spec, host_of)
    name = config_map_name(request.job_id, request.attempt)
    env = {**task_hosts.hosts_env(data), task_hosts.DIR_ENV: task_hosts.MOUNT}
    for body in bodies:
        mount(body, VOLUME, task_hosts.MOUNT, {"configMap": {"name": name}})
        container = body["spec"]["containers"][0]
        written = {e["name"]: e for e in container.get("env") or []}
        written.update({k: {"name": k, "value": v} for k, v in env.items()})
        container["env"] = [written[k] for k in sorted(written)]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": job_labels(request.job_id, request.tenant, request.attempt),
            "annotations": {JOB_ID_ANNOTATION: request.job_id},
        },
        "data": data,
    }


def create(api: CoreApi, namespace: str, body: Obj) -> None:
    """Create the attempt's hosts ConfigMap (kept if an earlier try of the attempt made it)."""
    try:
        api.create_config_map(namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
