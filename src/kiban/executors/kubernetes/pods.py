"""The pods and headless Service of a job attempt, and what a pod's status means (pure).

Pods are bound at creation (``spec.nodeName``) rather than created for a scheduler and bound
through the Binding subresource: kiban has already placed the gang and counted the node's
capacity, so one request per replica suffices (half the API calls of create-then-bind, which
is what bounds placement speed), no pod ever waits unbound where another scheduler could take
it, and it works on clusters without any scheduler. The kubelet still admits each pod against
the node's allocatable resources; a pod it rejects fails with a reason such as
``OutOfnvidia.com/gpu`` and is reported lost, so the job returns to its queue.

Pods run with ``restartPolicy: Never``: kiban itself honours the job's restart policy by
starting a new attempt (new pods) on the same placement.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kiban.domain.jobspec import TaskSpec, VolumeSpec
from kiban.executors.base import (
    CANNOT_START,
    EXIT_CANNOT_START,
    LaunchError,
    LaunchRequest,
    Observation,
)
from kiban.executors.environment import replica_command, replica_environment
from kiban.executors.kubernetes.naming import (
    ATTEMPT_LABEL,
    JOB_ID_ANNOTATION,
    JOB_LABEL,
    MANAGED_BY,
    MANAGER,
    RANK_LABEL,
    REVISION_LABEL,
    SERVICE_LABEL,
    TASK_LABEL,
    TENANT_LABEL,
    job_labels,
    master_addr,
    pod_name,
    revision_service_name,
    service_name,
)
from kiban.executors.kubernetes.options import GPU_RESOURCE, KubernetesOptions
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.serving.runtime.options import HOST_ENV

CONTAINER = "main"
# Pod failures that are the infrastructure's doing, not the job's: the replica counts as lost.
LOST_REASONS = {
    "Evicted",
    "NodeLost",
    "NodeShutdown",
    "Shutdown",
    "Terminated",
    "UnexpectedAdmissionError",
    "NodeAffinity",
    "Preempting",
}
# Waiting reasons after which the container will never start on its own.
FATAL_WAITING = {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}
# Waiting reasons of an image not pulled yet: the kubelet keeps trying (a registry may be down
# for a while), so they end the replica only once PULL_DEADLINE_S have passed.
PULL_WAITING = {"ErrImagePull", "ImagePullBackOff"}
PULL_DEADLINE_S = 600.0
"""How long a pod may wait for its image, or for its container to be made: the default of a
Deployment's ``progressDeadlineSeconds`` and of Knative's progress deadline. Without one, a job
whose image does not exist would hold its GPUs, and a revision would stay Loading, for ever."""
# Waiting reasons of a container not made yet: brief, unless a volume cannot be mounted (a
# claim that does not exist), which keeps the pod there with no reason in its status.
CREATE_WAITING = {"ContainerCreating", "PodInitializing"}
CREATE_SHOWN_AFTER_S = 30.0
"""A container not made after this long is shown as a wait (sooner, every start would be)."""


LOCALHOST = "localhost"
REPLICA_HOST = "0.0.0.0"  # a service replica binds every address of its pod


def service_replica_environment(labels: Mapping[str, str]) -> dict[str, str]:
    """What a pod of a service's replica is told besides the job's variables: to listen on
    every address of the pod (``$KIBAN_REPLICA_HOST``), since the revision's Service targets
    the pod's IP and the control plane probes ``podIP:port``; kiban's model server binds
    loopback otherwise. Every service replica is told, custom runtimes too: the pod does not
    know its runtime, and a custom server may use the variable or ignore it (it binds where
    it likes either way). Another address (``::`` on an IPv6-only cluster) is an explicit
    ``--host`` in the service's args (its ``env`` may not set ``KIBAN_*`` names). A job that is
    no service's gets nothing."""
    return {HOST_ENV: REPLICA_HOST} if SERVICE_LABEL in labels else {}


def needs_no_service(request: LaunchRequest) -> bool:
    """A one-replica attempt has no headless Service: its replica 0 is itself, so
    ``MASTER_ADDR`` is ``localhost``, and one object and one API round trip fewer per job is
    what a burst of single jobs is limited by."""
    return len(request.placements) == 1


def service_manifest(request: LaunchRequest, namespace: str) -> dict[str, Any]:
    """The headless Service of one attempt: DNS names for its pods, and their owner."""
    labels = job_labels(request.job_id, request.tenant, request.attempt)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(request.job_id, request.attempt),
            "namespace": namespace,
            "labels": labels,
            "annotations": {JOB_ID_ANNOTATION: request.job_id},
        },
        "spec": {
            "clusterIP": "None",
            "selector": {
                JOB_LABEL: labels[JOB_LABEL],
                ATTEMPT_LABEL: labels[ATTEMPT_LABEL],
            },
            # Replica 0's name resolves before it is Ready: the workers need it to rendezvous.
            "publishNotReadyAddresses": True,
        },
    }


def revision_service_manifest(
    namespace: str, tenant: str, service: str, revision: str, port: int
) -> dict[str, Any]:
    """A ClusterIP Service over the ready pods of one revision of an inference service: the
    revision's stable address inside the cluster (kiban's router reaches pods directly). Its
    labels name the tenant and revision, so that a restarted control plane finds the Services
    it made and can remove those whose revisions no longer take traffic."""
    labels = {
        MANAGED_BY: MANAGER,
        TENANT_LABEL: tenant,
        SERVICE_LABEL: service,
        REVISION_LABEL: revision,
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": revision_service_name(revision),
            "namespace": namespace,
            "labels": labels,
        },
        "spec": {
            "selector": {SERVICE_LABEL: service, REVISION_LABEL: revision},
            "ports": [{"name": "http", "port": 80, "targetPort": port, "protocol": "TCP"}],
        },
    }


def _pod_volume(volume: VolumeSpec) -> dict[str, Any]:
    """A volume of the pod: its claim, or its emptyDir (in memory for ``/dev/shm``)."""
    if volume.empty_dir is not None:
        empty: dict[str, Any] = {}
        if volume.empty_dir.medium:
            empty["medium"] = volume.empty_dir.medium
        if volume.empty_dir.size_limit is not None:
            empty["sizeLimit"] = str(volume.empty_dir.size_limit)
        return {"name": volume.name, "emptyDir": empty}
    return {
        "name": volume.name,
        "persistentVolumeClaim": {"claimName": volume.claim_name, "readOnly": volume.read_only},
    }


def pod_manifest(
    request: LaunchRequest,
    placement: ReplicaPlacement,
    namespace: str,
    options: KubernetesOptions,
) -> dict[str, Any]:
    """The pod of one replica, bound to its node; LaunchError names a field that is missing."""
    index, task = _task(request, placement.task)
    image = task.image or options.default_image
    if image is None:
        raise LaunchError(
            f"spec.tasks[{index}].image is required on the Kubernetes executor "
            "(or start kiban with a default image)"
        )
    world_size = len(request.placements)
    alone = needs_no_service(request)
    addr = (
        LOCALHOST
        if alone
        else master_addr(request.job_id, request.attempt, namespace, options.cluster_domain)
    )
    env = replica_environment(
        job_id=request.job_id,
        job_name=request.job_name,
        attempt=request.attempt,
        task=task,
        placement=placement,
        world_size=world_size,
        master_addr=addr,
        master_port=request.master_port,
        checkpoint_dir=f"{options.checkpoint_root}/{request.job_id}",
        index_env=request.spec.index_env,
        api_env=request.api_env,
    )
    env.update(service_replica_environment(request.labels))
    gpus = len(placement.gpu_ids)
    if gpus:
        # The device plugin picks the devices and sets NVIDIA_VISIBLE_DEVICES; inside the
        # container they are numbered from 0, so kiban's GPU ids (its bookkeeping) must not leak.
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env.pop("NVIDIA_VISIBLE_DEVICES", None)
    else:
        env["NVIDIA_VISIBLE_DEVICES"] = "none"
    command = replica_command(
        launcher=request.spec.launcher,
        task=task,
        placement=placement,
        world_size=world_size,
        master_addr=addr,
        master_port=request.master_port,
        python=options.python,
    )
    requests: dict[str, str] = {
        "cpu": f"{placement.cpu_millis}m",
        "memory": str(placement.memory),
    }
    limits: dict[str, str] = {"memory": str(placement.memory)}
    if gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(gpus)
    # Extended resources: requests equal limits (Kubernetes requires it of them; hugepages
    # in bytes), so the kubelet's device plugins hand the pod exactly what kiban counted.
    for resource, amount in sorted(task.resources.extended.items()):
        requests[resource] = limits[resource] = str(amount)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": command,
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "resources": {"requests": requests, "limits": limits},
    }
    if task.security_context is not None:
        container["securityContext"] = task.security_context.model_dump(
            by_alias=True, exclude_none=True, exclude_defaults=True
        )
    if task.volumes:
        container["volumeMounts"] = [
            {"name": v.name, "mountPath": v.mount_path, "readOnly": v.read_only}
            for v in task.volumes
        ]
    name = pod_name(request.job_id, request.attempt, placement.rank)
    labels = {**request.labels, **job_labels(request.job_id, request.tenant, request.attempt)}
    labels[RANK_LABEL] = str(placement.rank)
    labels[TASK_LABEL] = placement.task
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "annotations": {**task.annotations, JOB_ID_ANNOTATION: request.job_id},
    }
    grace = request.spec.termination_grace_period
    spec: dict[str, Any] = {
        "nodeName": placement.node,
        "restartPolicy": "Never",
        "hostname": name,
        "containers": [container],
        "tolerations": [
            {"key": key, "operator": "Exists"} for key in sorted(options.tolerated_taints)
        ],
        "terminationGracePeriodSeconds": round(grace if grace is not None else 30.0),
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
    }
    if not alone:
        spec["subdomain"] = service_name(request.job_id, request.attempt)
    if task.volumes:
        spec["volumes"] = [_pod_volume(v) for v in task.volumes]
    if task.node_selector:
        spec["nodeSelector"] = dict(task.node_selector)
    if task.affinity:
        spec["affinity"] = dict(task.affinity)
    if task.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def owner_reference(job_id: str, attempt: int, service_uid: str) -> dict[str, Any]:
    """Makes a pod part of its attempt's Service: collected with it where a collector runs."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "name": service_name(job_id, attempt),
        "uid": service_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _task(request: LaunchRequest, name: str) -> tuple[int, TaskSpec]:
    for index, task in enumerate(request.spec.tasks):
        if task.name == name:
            return index, task
    raise LaunchError(f"placement names task {name!r}, which the job does not have")


def _main_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        if status.get("name") == CONTAINER:
            return dict(status)
    return dict(statuses[0]) if statuses else {}


def observe_pod(
    pod: Mapping[str, Any] | None, node_present: bool = True, now: float | None = None
) -> Observation:
    """What one replica's pod says: running, exited with a code, or lost.

    ``None`` is a pod that no longer exists (deleted, or collected with its node): lost. A pod
    on a node that is gone, in phase Unknown, or failed for a reason of the infrastructure
    (evicted, refused by the kubelet for lack of resources) is lost too. A container that can
    never start (an invalid image name), or whose image is still not pulled or whose container
    is still not made ``PULL_DEADLINE_S`` after the pod was (``now``, Unix time), ends with
    ``EXIT_CANNOT_START``.
    """
    if pod is None:
        return Observation(running=False, lost=True, message="its pod was deleted")
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    node = (pod.get("spec") or {}).get("nodeName") or "?"
    main = _main_status(pod)
    state = main.get("state") or {}
    terminated = state.get("terminated") or {}
    if phase == "Succeeded":
        return Observation(running=False, exit_code=int(terminated.get("exitCode", 0) or 0))
    if phase == "Failed":
        reason = str(status.get("reason") or "")
        detail = str(status.get("message") or reason)
        if reason in LOST_REASONS or reason.startswith("OutOf") or "exitCode" not in terminated:
            return Observation(
                running=False, lost=True, message=f"pod failed on node {node}: {detail}"
            )
        code = int(terminated["exitCode"])
        why = terminated.get("message") or terminated.get("reason") or ""
        return Observation(running=False, exit_code=code, message=str(why))
    if phase == "Unknown":
        return Observation(
            running=False, lost=True, message=f"pod in phase Unknown: node {node} unreachable"
        )
    if not node_present:
        return Observation(running=False, lost=True, message=f"node {node} is gone")
    waiting = state.get("waiting") or {}
    waiting_for = waiting.get("reason")
    why = f"{waiting_for}: {waiting.get('message', '')}"
    if waiting_for in FATAL_WAITING:
        return Observation(
            running=False, exit_code=EXIT_CANNOT_START, message=f"{CANNOT_START}: {why}"
        )
    if waiting_for in PULL_WAITING:
        waited = _age_s(pod, now)
        if waited is not None and waited >= PULL_DEADLINE_S:
            return Observation(
                running=False,
                exit_code=EXIT_CANNOT_START,
                message=f"{CANNOT_START}: its image was not pulled in {waited:.0f} s: {why}",
            )
        return Observation(running=True, message=f"waiting for its image: {why}")
    if waiting_for in CREATE_WAITING:
        waited = _age_s(pod, now)
        stuck = f"{waiting_for} (a volume that cannot be mounted keeps a pod there; see its events)"
        if waited is not None and waited >= PULL_DEADLINE_S:
            return Observation(
                running=False,
                exit_code=EXIT_CANNOT_START,
                message=f"{CANNOT_START}: its container was not made in {waited:.0f} s: {stuck}",
            )
        if waited is not None and waited >= CREATE_SHOWN_AFTER_S:
            return Observation(running=True, message=f"waiting for its container: {stuck}")
    return Observation(running=True)


def _age_s(pod: Mapping[str, Any], now: float | None) -> float | None:
    """Seconds since the pod was created (``now`` in Unix time), when both are known."""
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    if now is None or not isinstance(created, str):
        return None
    try:
        return now - datetime.fromisoformat(created).timestamp()
    except ValueError:
        return None
