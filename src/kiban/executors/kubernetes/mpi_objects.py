"""What an MPI job's attempt has on Kubernetes besides its pods, as the MPI Operator makes it.

A ``launcher: mpirun`` attempt gets (names after the attempt's headless Service, as the
Operator names them after the job):

- ``<service>-config``, a ConfigMap whose ``hostfile`` lists each worker by its DNS name under
  the attempt's headless Service with its slots, mounted at ``/etc/mpi`` in the launcher;
- ``<service>-ssh``, a Secret of type ``kubernetes.io/ssh-auth`` with a key pair generated for
  the attempt, mounted at ``spec.mpi.sshAuthMountPath`` in every pod as ``id_rsa``,
  ``id_rsa.pub`` and ``authorized_keys`` (the workers' sshd lets the launcher in);
- the launcher's environment: the implementation's hostfile variable and ssh retries (the
  Operator's ``OMPI_MCA_orte_default_hostfile``, ``I_MPI_HYDRA_HOST_FILE``,
  ``HYDRA_HOST_FILE``...) and ``MPI_HOST``, the workers' names joined by commas (what
  Volcano's mpi plugin sets).

Both objects are owned by the attempt's Service (ownerReferences, as its pods are), so a
cluster's collector deletes them with it, and kiban deletes them itself with the attempt.

The launcher pod is created only once every worker pod is Running (the Operator's
``launcherCreationPolicy: WaitForWorkersReady``): ``launch`` creates the workers and records
the launcher under a handle whose uid is ``DEFERRED_UID``; its body is kept in the Secret (a
restarted control plane finds it there: it holds the job's API token) and ``observe`` creates
it once the workers run. A launcher made whose pod is gone is lost, not made again (known in
memory: one deleted while kiban was down would be made again).

The hostfile's text, the slots and the hostfile's variables are ``executors.mpi_launch``'s, as
the local executor's; only ssh's retries and ``MPI_HOST`` are Kubernetes' own.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from kiban.domain.mpi import MpiImplementation, MpiSpec
from kiban.executors import mpi_launch
from kiban.executors.base import LaunchRequest
from kiban.executors.kubernetes.naming import (
    JOB_ID_ANNOTATION,
    RANK_LABEL,
    job_labels,
    pod_name,
    service_name,
)

Obj = dict[str, Any]

CONFIG_MOUNT = "/etc/mpi"
HOSTFILE = "hostfile"
CONFIG_VOLUME = "mpi-job-config"
SSH_VOLUME = "ssh-auth"
PRIVATE_KEY, PUBLIC_KEY = "ssh-privatekey", "ssh-publickey"  # kubernetes.io/ssh-auth's keys
LAUNCHER_POD_KEY = "kiban-launcher-pod.json"  # in the Secret: the pod to create later
WORKERS_ANNOTATION = "kiban.dev/mpi-workers"  # on the launcher: how many workers it waits for
DEFERRED_UID = "deferred"  # the uid of a launcher's handle before its pod exists
SSH_RETRIES = "-o ConnectionAttempts=10"  # a worker's sshd may start after its pod runs
HOST_ENV = "MPI_HOST"


def config_map_name(job_id: str, attempt: int) -> str:
    return f"{service_name(job_id, attempt)}-config"


def secret_name(job_id: str, attempt: int) -> str:
    return f"{service_name(job_id, attempt)}-ssh"


def is_deferred(handle: str) -> bool:
    return handle.endswith(f"/{DEFERRED_UID}")


def is_mpi_pod(pod: Obj) -> bool:
    """Whether a pod is an MPI attempt's (it mounts the attempt's keys)."""
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any(v.get("name") == SSH_VOLUME for v in volumes)


def replica_host(job_id: str, attempt: int, rank: int, namespace: str, domain: str) -> str:
    """A replica's DNS name under its attempt's headless Service."""
    service = service_name(job_id, attempt)
    return f"{pod_name(job_id, attempt, rank)}.{service}.{namespace}.svc.{domain}"


def operator_labels(request: LaunchRequest, index: int, launcher: int) -> dict[str, str]:
    """The labels the MPI Operator gives its pods (``kubectl logs -l
    training.kubeflow.org/job-role=launcher`` finds the launcher): the job's name, the role and
    the replica's index within its role."""
    placement = request.placements[index]
    return {
        "training.kubeflow.org/job-name": request.job_name,
        "training.kubeflow.org/job-role": "launcher" if index == launcher else "worker",
        "training.kubeflow.org/replica-index": str(placement.index),
    }


def launcher_environment(implementation: MpiImplementation, hosts: list[str]) -> dict[str, str]:
    """What the launcher is told: where the hostfile is (``mpi_launch``'s variables), that ssh
    retries while worker DNS names appear, and the workers' names (``MPI_HOST``)."""
    env = mpi_launch.launcher_environment(implementation, f"{CONFIG_MOUNT}/{HOSTFILE}")
    env[HOST_ENV] = ",".join(hosts)
    if implementation is MpiImplementation.OPEN_MPI:
        env["OMPI_MCA_plm_rsh_args"] = SSH_RETRIES
    elif implementation is MpiImplementation.INTEL:
        env["I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"] = SSH_RETRIES
    else:
        env["HYDRA_LAUNCH_EXTRA_ARGS"] = SSH_RETRIES
    return env


def ssh_key_pair() -> tuple[bytes, bytes]:
    """A new key pair: the private key (OpenSSH format) and its ``authorized_keys`` line
    (ECDSA P-521, as the MPI Operator generates)."""
    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public + b"\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class MpiAttempt:
    """An MPI attempt's objects to create, and which pod body is the launcher's."""

    config_map: Obj
    secret: Obj
    launcher: int  # index of the launcher's body among the attempt's
    workers: int  # worker pods it waits for

    def with_owner(self, owner: Obj) -> None:
        for body in (self.config_map, self.secret):
            body["metadata"]["ownerReferences"] = [owner]

    def keep_launcher(self, body: Obj) -> None:
        """Keep the launcher's pod body in the Secret, to be created later."""
        self.secret["data"][LAUNCHER_POD_KEY] = _b64(json.dumps(body).encode())


def launcher_body(secret: Obj) -> Obj | None:
    """The launcher's pod body kept in the Secret (None: not kept)."""
    data = (secret.get("data") or {}).get(LAUNCHER_POD_KEY)
    if not data:
        return None
    body: Obj = json.loads(base64.b64decode(data))
    return body


def prepare(
    request: LaunchRequest, bodies: list[Obj], namespace: str, domain: str, alone: bool
) -> MpiAttempt | None:
    """For an ``mpirun`` attempt: its ConfigMap and Secret, and its pod ``bodies`` (one per
    placement) given the mounts and the launcher's variables. None for any other attempt."""
    spec = request.spec
    if spec.launcher != "mpirun":
        return None
    mpi = spec.mpi or MpiSpec()
    workers = [
        p
        for p in request.placements
        if p.task == mpi.worker_task or (mpi.run_launcher_as_worker and p.task == mpi.launcher_task)
    ]
    workers.sort(key=lambda p: p.rank)
    hosts = [
        "localhost"
        if alone
        else replica_host(request.job_id, request.attempt, p.rank, namespace, domain)
        for p in workers
    ]
    slots = mpi_launch.slots_per_worker(spec)
    labels = job_labels(request.job_id, request.tenant, request.attempt)
    annotations = {JOB_ID_ANNOTATION: request.job_id}

    def meta(name: str) -> Obj:
        return {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations}

    config = config_map_name(request.job_id, request.attempt)
    secret = secret_name(request.job_id, request.attempt)
    private, public = ssh_key_pair()
    attempt = MpiAttempt(
        config_map={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(config),
            "data": {
                HOSTFILE: mpi_launch.hostfile_text(
                    mpi.implementation, [mpi_launch.MpiHost(host, slots) for host in hosts]
                )
            },
        },
        secret={
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/ssh-auth",
            "metadata": meta(secret),
            "data": {PRIVATE_KEY: _b64(private), PUBLIC_KEY: _b64(public)},
        },
        launcher=next(i for i, p in enumerate(request.placements) if p.task == mpi.launcher_task),
        workers=sum(1 for p in request.placements if p.task != mpi.launcher_task),
    )
    for index, body in enumerate(bodies):
        body["metadata"]["labels"] |= operator_labels(request, index, attempt.launcher)
        mount(body, SSH_VOLUME, mpi.ssh_auth_mount_path, _ssh_volume(secret))
        if index == attempt.launcher:
            mount(body, CONFIG_VOLUME, CONFIG_MOUNT, _config_volume(config))
            env = launcher_environment(mpi.implementation, hosts)
            container = body["spec"]["containers"][0]
            written = {e["name"]: e for e in container.get("env") or []}
            written.update({k: {"name": k, "value": v} for k, v in env.items()})
            container["env"] = [written[k] for k in sorted(written)]
            body["metadata"]["annotations"][WORKERS_ANNOTATION] = str(attempt.workers)
    return attempt


def mount(body: Obj, name: str, path: str, volume: Obj) -> None:
    """Add a volume to a pod body and mount it in its container."""
    body["spec"].setdefault("volumes", []).append({"name": name, **volume})
    container = body["spec"]["containers"][0]
    container.setdefault("volumeMounts", []).append(
        {"name": name, "mountPath": path, "readOnly": True}
    )


def _ssh_volume(secret: str) -> Obj:
    items = [
        {"key": PRIVATE_KEY, "path": "id_rsa"},
        {"key": PUBLIC_KEY, "path": "id_rsa.pub"},
        {"key": PUBLIC_KEY, "path": "authorized_keys"},
    ]
    return {"secret": {"secretName": secret, "defaultMode": 0o600, "items": items}}


def _config_volume(config: str) -> Obj:
    items = [{"key": HOSTFILE, "path": HOSTFILE, "mode": 0o444}]
    return {"configMap": {"name": config, "items": items}}


def workers_running(pods: list[Obj], launcher_rank: int, expected: int) -> tuple[int, bool]:
    """How many of an attempt's worker pods (``pods``: the attempt's, the launcher's left
    out by its rank) run, and whether that is every one of them, none being deleted."""
    running = 0
    for pod in pods:
        if (pod["metadata"].get("labels") or {}).get(RANK_LABEL) == str(launcher_rank):
            continue
        deleting = pod["metadata"].get("deletionTimestamp")
        if (pod.get("status") or {}).get("phase") == "Running" and not deleting:
            running += 1
    return running, running >= expected
