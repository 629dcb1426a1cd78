"""An attempt's credentials on Kubernetes: a Secret ``<service>-env`` its pods refer to.

The job's API token and a notebook's Jupyter token (``CREDENTIAL_ENV``) would otherwise be
values in the pod spec, readable by anyone who may ``get pods`` in the tenant's namespace (and
shown by ``kubectl describe pod``). They go in a Secret of the attempt instead, and each
container's variable refers to its key (``valueFrom.secretKeyRef``), as Kubernetes advises for
credentials. Owned by the attempt's Service where it has one; deleted by name with the attempt.
"""

from __future__ import annotations

import base64

from kubernetes.client.exceptions import ApiException

from kiban.executors.base import CREDENTIAL_ENV, LaunchRequest
from kiban.executors.kubernetes.api import CoreApi, Obj, ignore_gone
from kiban.executors.kubernetes.naming import JOB_ID_ANNOTATION, job_labels, service_name

SUFFIX = "-env"


def secret_name(job_id: str, attempt: int) -> str:
    return f"{service_name(job_id, attempt)}{SUFFIX}"


def refers_to_secret(pod: Obj) -> bool:
    """Whether a pod takes a variable from its attempt's credentials Secret."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return any(
        str(((entry.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")).endswith(SUFFIX)
        for container in containers
        for entry in container.get("env") or []
    )


def prepare(request: LaunchRequest, bodies: list[Obj], namespace: str) -> Obj | None:
    """The attempt's credentials Secret, with each pod body's credential variables turned into
    references to it; None (bodies untouched) when the attempt has no credential."""
    credentials = {k: v for k, v in request.api_env.items() if k in CREDENTIAL_ENV}
    if not credentials:
        return None
    name = secret_name(request.job_id, request.attempt)
    for body in bodies:
        container = body["spec"]["containers"][0]
        container["env"] = [
            {"name": e["name"], "valueFrom": {"secretKeyRef": {"name": name, "key": e["name"]}}}
            if e["name"] in credentials
            else e
            for e in container.get("env") or []
        ]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": job_labels(request.job_id, request.tenant, request.attempt),
            "annotations": {JOB_ID_ANNOTATION: request.job_id},
        },
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(credentials.items())},
    }


def create(api: CoreApi, namespace: str, body: Obj) -> None:
    """Create the attempt's credentials Secret; one an earlier try of the attempt made holds
    that try's token, so it is replaced (kiban may create and delete Secrets, not update them)."""
    try:
        api.create_secret(namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        ignore_gone(api.delete_secret, namespace, body["metadata"]["name"])
        api.create_secret(namespace, body)
