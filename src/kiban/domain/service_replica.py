"""The kiban Job that runs one replica of one revision of a service.

Each replica is an ordinary one-task Job, so that it queues, counts against quotas, is placed
and preempted like any other work. It has no maximum runtime (a service runs until stopped) and
restarts on failure.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kiban.domain.jobspec import DNS_LABEL, JobManifest, check_dns_label
from kiban.domain.model_storage import DEFAULT_PVC_ROOT as PVC_ROOT
from kiban.domain.service import ServiceSpec, pvc_claim

SERVICE_LABEL = "kiban.dev/service"
REVISION_LABEL = "kiban.dev/revision"
TASK_NAME = "server"
RUNTIME_MODULE = "kiban.serving.runtime"
_MAX_LABEL = 63


def replica_job_name(service: str, revision: str, index: int) -> str:
    """``{revision}-{index}`` for kiban's revision names (``{service}-{number}``),
    ``{service}-{revision}-{index}`` for others when that is a DNS label and unambiguous; else a
    trimmed prefix, the index and a hash of all three (``...-{index}-h{hash}``), so that
    different inputs never share a name (a plain name ends in digits, a hashed one does not)."""
    own = revision.removeprefix(f"{service}-")
    if own != revision and own.isdigit():
        # kiban's own revision names (``chat-00002``): the replica is ``chat-00002-0``.
        plain = f"{revision}-{index}"
    elif "-" not in revision and not revision.isdigit():
        plain = f"{service}-{revision}-{index}"
    else:
        plain = ""
    if plain and len(plain) <= _MAX_LABEL and DNS_LABEL.match(plain):
        return plain
    digest = hashlib.sha256(f"{service}\x00{revision}\x00{index}".encode()).hexdigest()[:12]
    tail = f"-{index}-h{digest}"
    head = "".join(c if c.isalnum() and c.isascii() else "-" for c in f"{service}-{revision}")
    head = head.lower()[: _MAX_LABEL - len(tail)].strip("-") or "svc"
    return head + tail


SERVING_PORT = 8080  # KServe's model servers listen on 8080 too


def replica_port(spec: ServiceSpec) -> int | None:
    """The port a replica serves on: a custom runtime's own port, or None for "the job's
    ``MASTER_PORT``" (what kiban's model server listens on, set by the executor per job)."""
    return spec.port if spec.runtime == "custom" else None


def replica_job_manifest(
    *, service: str, revision: str, index: int, spec: ServiceSpec, runtime_python: str = "python"
) -> JobManifest:
    """The Job for replica ``index`` of ``revision`` of ``service``: one ``server`` task with the
    spec's queue, priority class, resources, env, image and volumes.

    A ``pvc://`` model's claim is mounted read-only at ``/mnt/pvc/<claim>``; when the spec
    already mounts that claim elsewhere, the runtime is given the ``file://`` path there.
    """
    check_dns_label(service, "service name")
    if not revision or not all(c.isalnum() or c in "-._" for c in revision):
        raise ValueError(f"revision {revision!r} must be letters, digits, '-', '.' and '_'")
    if index < 0:
        raise ValueError(f"replica index {index} must not be negative")
    volumes = [v.model_dump(by_alias=True) for v in spec.volumes]
    env = dict(spec.env)
    if spec.runtime == "custom":
        assert spec.command is not None  # ServiceSpec requires it for runtime custom
        command = [*spec.command, *spec.args]
        if spec.port is not None:
            env["PORT"] = str(spec.port)
    else:
        command = [runtime_python, "-m", RUNTIME_MODULE, "--model_name", spec.model_name]
        command += _storage_args(spec, volumes)
        command += ["--task", spec.task, *spec.args]
    task: dict[str, Any] = {
        "name": TASK_NAME,
        "replicas": 1,
        "command": command,
        "env": env,
        "resources": {
            "gpu": spec.resources.gpu,
            "cpu": f"{spec.resources.cpu}m",
            "memory": spec.resources.memory,
        },
        "volumes": volumes,
    }
    if spec.image is not None:
        task["image"] = spec.image
    # A replica that exits is replaced by the service controller (a new job), which also
    # tells a model that cannot load from a crash: the job itself is never restarted.
    job_spec: dict[str, Any] = {
        "tasks": [task],
        "queue": spec.queue,
        "restartPolicy": "Never",
        # Where pods have their own network, every replica serves on one port (the revision's
        # Service targets it); on one machine the executor picks a free one instead.
        "masterPort": spec.port if spec.runtime == "custom" and spec.port else SERVING_PORT,
    }
    if spec.priority_class is not None:
        job_spec["priorityClass"] = spec.priority_class
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {
            "name": replica_job_name(service, revision, index),
            "labels": {SERVICE_LABEL: service, REVISION_LABEL: revision},
        },
        "spec": job_spec,
    }
    return JobManifest.model_validate(document)


def runtime_storage_uri(spec: ServiceSpec) -> str | None:
    """The ``--storage_uri`` a huggingface replica's runtime is given: the spec's own, except a
    ``pvc://`` model whose claim the spec mounts elsewhere than ``/mnt/pvc/<claim>``, which is
    read as ``file://`` under that mount."""
    if spec.storage_uri is None:
        return None
    found = pvc_claim(spec.storage_uri)
    if found is None:
        return spec.storage_uri
    claim, path = found
    mounted = next((v for v in spec.volumes if v.claim_name == claim), None)
    if mounted is not None and mounted.mount_path != f"{PVC_ROOT}/{claim}":
        return "file://" + mounted.mount_path.rstrip("/") + (f"/{path}" if path else "")
    return spec.storage_uri


def _storage_args(spec: ServiceSpec, volumes: list[dict[str, Any]]) -> list[str]:
    """``--storage_uri URI`` (mounting a pvc:// claim into ``volumes``) or ``--model_id ID``."""
    uri = runtime_storage_uri(spec)
    if uri is None:
        return ["--model_id", spec.model_id] if spec.model_id is not None else []
    found = pvc_claim(uri)
    if found is not None and not any(v["claimName"] == found[0] for v in volumes):
        claim = found[0]
        names = {v["name"] for v in volumes}
        name = next(n for n in ("model", *(f"model-{i}" for i in range(1, 100))) if n not in names)
        volumes.append(
            {"name": name, "claimName": claim, "mountPath": f"{PVC_ROOT}/{claim}", "readOnly": True}
        )
    return ["--storage_uri", uri]
