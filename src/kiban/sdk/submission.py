"""A job manifest as the CLI and the SDK submit it, completed in one place.

A ``kiban/v1`` Job runs in the directory it was submitted from unless it says otherwise, as
Slurm runs jobs; a job that names no queue goes to ``$KIBAN_QUEUE`` when that is set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kiban.sdk.discovery import env_value

__all__ = ["as_document", "complete_job_manifest"]


def complete_job_manifest(
    manifest: dict[str, Any], working_dir: str | Path | None = None, queue: str | None = None
) -> dict[str, Any]:
    """A job manifest as the CLI and the SDK send it; ``manifest`` itself is not changed.

    A ``kiban/v1`` Job that names no ``spec.workingDir`` runs in ``working_dir`` (default: the
    current directory), where it was submitted from, as Slurm runs jobs. A job (kiban's or a
    Volcano Job) that names no ``spec.queue`` goes to ``queue`` (default: ``$KIBAN_QUEUE``;
    unset, the server chooses the member's queue), an MPIJob likewise in its scheduling
    policy. Other documents are returned as they are.
    """
    spec = manifest.get("spec")
    kind = (manifest.get("apiVersion"), manifest.get("kind"))
    if kind == ("kubeflow.org/v2beta1", "MPIJob"):
        return _mpijob_queue(manifest, queue)
    if kind not in (("kiban/v1", "Job"), ("batch.volcano.sh/v1alpha1", "Job")):
        return manifest
    if not isinstance(spec, dict):
        return manifest
    added: dict[str, Any] = {}
    if kind[0] == "kiban/v1" and "workingDir" not in spec:
        added["workingDir"] = os.getcwd() if working_dir is None else os.fspath(working_dir)
    queue = queue or env_value("KIBAN_QUEUE")
    if queue and "queue" not in spec:
        added["queue"] = queue
    return {**manifest, "spec": {**spec, **added}} if added else manifest


def _mpijob_queue(manifest: dict[str, Any], queue: str | None) -> dict[str, Any]:
    """An MPIJob names its queue in ``spec.runPolicy.schedulingPolicy.queue``: ``queue``
    (default ``$KIBAN_QUEUE``) goes there when it names none."""
    queue = queue or env_value("KIBAN_QUEUE")
    spec = manifest.get("spec")
    policy = spec.get("runPolicy", {}) if isinstance(spec, dict) else None
    scheduling = policy.get("schedulingPolicy", {}) if isinstance(policy, dict) else None
    if not queue or not isinstance(scheduling, dict) or "queue" in scheduling:
        return manifest
    assert isinstance(spec, dict) and isinstance(policy, dict)
    scheduling = {**scheduling, "queue": queue}
    policy = {**policy, "schedulingPolicy": scheduling}
    return {**manifest, "spec": {**spec, "runPolicy": policy}}


def as_document(text: str) -> dict[str, Any] | None:
    """A manifest's text as a mapping that JSON can carry; None when it is not one (the server
    then reads the text itself and says what is wrong with it, line and column)."""
    import yaml

    try:
        document = yaml.safe_load(text)
        json.dumps(document, allow_nan=False)
    except (yaml.YAMLError, TypeError, ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None
