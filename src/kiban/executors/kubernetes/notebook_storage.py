"""Notebooks on Kubernetes: each notebook's directory is a PersistentVolumeClaim of its own.

The claim lives in the tenant's namespace and is named for the member and the notebook
(``nb-<member>-<notebook>-<hash>``), so that it outlives every pod of the notebook: stopping or
culling a notebook deletes its pod, never its claim. One claim per notebook (ReadWriteOnce,
which every storage class provides) rather than one per member, so that two notebooks of one
member may run on different nodes. The server listens on the pod's own address, where only
kiban's ``/nb/`` route reaches it (with the notebook's Jupyter token).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from kubernetes.client.exceptions import ApiException

from kiban.domain.notebook import ANY_ADDRESS, NOTEBOOK_LABEL, NotebookRuntime
from kiban.executors.kubernetes.api import CoreApi
from kiban.executors.kubernetes.naming import MANAGED_BY, MANAGER, TENANT_LABEL, namespace_for
from kiban.executors.kubernetes.options import KubernetesOptions

MOUNT_ROOT = "/kiban/notebooks"
VOLUME_NAME = "notebook"
OWNER_ANNOTATION = "kiban.dev/owner"


def claim_name(owner: str, name: str) -> str:
    """The claim of one member's notebook: a DNS label, distinct for every (owner, name) even
    where cleaning the owner's free-text name makes two alike."""
    cleaned = re.sub(r"[^a-z0-9]+", "-", owner.lower()).strip("-")[:20].strip("-") or "member"
    digest = hashlib.sha256(f"{owner}\x00{name}".encode()).hexdigest()[:8]
    return f"nb-{cleaned}-{name[:28].rstrip('-')}-{digest}"


def claim_manifest(
    tenant: str, owner: str, name: str, namespace: str, options: KubernetesOptions
) -> dict[str, Any]:
    """The PersistentVolumeClaim that holds one notebook's directory."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": options.notebook_storage}},
    }
    if options.notebook_storage_class is not None:
        spec["storageClassName"] = options.notebook_storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(owner, name),
            "namespace": namespace,
            "labels": {MANAGED_BY: MANAGER, TENANT_LABEL: tenant, NOTEBOOK_LABEL: name},
            "annotations": {OWNER_ANNOTATION: owner},
        },
        "spec": spec,
    }


class KubeNotebookStorage:
    """The Kubernetes executor's ``NotebookStorage``: a claim per notebook, made on its first
    start and kept ever after."""

    def __init__(self, api: CoreApi, options: KubernetesOptions) -> None:
        self.api = api
        self.options = options

    def notebook_runtime(self, tenant: str, owner: str, name: str) -> NotebookRuntime:
        namespace = namespace_for(self.options.namespace_prefix, tenant)
        self._create(
            self.api.create_namespace,
            {"metadata": {"name": namespace, "labels": {MANAGED_BY: MANAGER}}},
        )
        claim = claim_manifest(tenant, owner, name, namespace, self.options)
        self._create(lambda body: self.api.create_claim(namespace, body), claim)
        mount = f"{MOUNT_ROOT}/{name}"
        volume = {"name": VOLUME_NAME, "claimName": claim["metadata"]["name"], "mountPath": mount}
        return NotebookRuntime(
            root_dir=mount, listen=ANY_ADDRESS, python=self.options.python, volumes=(volume,)
        )

    @staticmethod
    def _create(create: Any, body: dict[str, Any]) -> None:
        """Create it, or take the one that exists (409); other refusals raise, saying why."""
        try:
            create(body)
        except ApiException as exc:
            if exc.status != 409:
                kind = body.get("kind", "Namespace")
                raise RuntimeError(
                    f"the Kubernetes API refused the notebook's {kind} "
                    f"{body['metadata']['name']}: {exc.status} {exc.reason}"
                ) from None
