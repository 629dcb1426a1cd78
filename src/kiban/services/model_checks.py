"""Checks of a service's spec that the domain cannot make: its args against kiban's model server,
and whether its model is where its replicas will read it, when the control plane can look.

Both run with the manifest's own checks (``parse_service_submission``'s ``checks``), so that a
manifest is refused with all of its problems in one answer, each naming the field as written.

- **Runtime args** (huggingface): what would keep every replica from serving (``--help``, a port
  kiban sets, a value the model server refuses); see ``kiban.serving.runtime.options``.
- **The model's path**: the local executor runs replicas as processes on this machine, so a
  ``file://`` model, or a ``pvc://`` one (read from ``$KIBAN_PVC_ROOT/<claim>/<path>``, or under
  the mount a spec gives its claim), must be a directory here; one that is not is refused,
  naming the path, instead of a revision that fails to load and keeps its traffic. An executor
  with containers reads them inside the replica (the image, a mounted claim), where the control
  plane cannot look: nothing is checked or said. ``hf://`` models and ``modelId`` are looked up
  in the Hugging Face cache of the machine that runs the replica when it loads: not checked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from kiban.domain.errors import FieldProblem
from kiban.domain.model_storage import PVC_ROOT_ENV
from kiban.domain.service import ServiceSpec, SpecCheck, pvc_claim
from kiban.domain.service_replica import runtime_storage_uri
from kiban.executors.base import Capability
from kiban.services.jobs import ClusterFacts
from kiban.serving.runtime.options import arg_problems
from kiban.serving.runtime.storage import pvc_root


def _runtime_args(spec: ServiceSpec) -> list[FieldProblem]:
    if spec.runtime != "huggingface":
        return []  # a custom server's args are its own
    return [
        FieldProblem("spec.model.args" if index is None else f"spec.model.args[{index}]", message)
        for index, message in arg_problems(spec.args)
    ]


RUNTIME_ARGS = SpecCheck(reads=("spec.runtime", "spec.model.args"), run=_runtime_args)


def model_path_check(facts: ClusterFacts, environ: Mapping[str, str] | None = None) -> SpecCheck:
    """The check of a huggingface service's ``file://`` or ``pvc://`` model on an executor that
    runs replicas as local processes. ``environ``: the environment replicas inherit (default:
    this process's, which the local executor passes on), which gives ``$KIBAN_PVC_ROOT``."""

    def run(spec: ServiceSpec) -> list[FieldProblem]:
        if Capability.CONTAINERS in facts.capabilities or spec.runtime != "huggingface":
            return []
        found = local_model_path(spec, os.environ if environ is None else environ)
        if found is None:
            return []
        path, how = found
        if path.is_dir():
            return []
        what = "is not a directory" if path.exists() else "does not exist"
        return [
            FieldProblem(
                "spec.model.storageUri",
                f"{spec.storage_uri}: {path} {what} on this machine, where the local executor's "
                f"replicas read the model{how}",
            )
        ]

    return SpecCheck(reads=("spec.runtime", "spec.model.storageUri", "spec.volumes"), run=run)


def local_model_path(spec: ServiceSpec, environ: Mapping[str, str]) -> tuple[Path, str] | None:
    """Where a replica run as a local process reads the model, and how that path was made (for
    a message); None for a model that is not a path (``hf://``, ``modelId``)."""
    uri = runtime_storage_uri(spec)
    if uri is None:
        return None
    if uri.startswith("file://"):
        path = Path(unquote(urlsplit(uri).path))
        if uri != spec.storage_uri:  # a pvc:// model whose claim the spec mounts elsewhere
            return path, " (the claim's mountPath in spec.volumes, which it does not mount)"
        return path, ""
    found = pvc_claim(uri)
    if found is None:
        return None
    claim, sub = found
    root = pvc_root(environ)
    path = root / claim / unquote(sub) if sub else root / claim
    return path, f" (${PVC_ROOT_ENV}/<claim>/<path>, ${PVC_ROOT_ENV} being {root})"
