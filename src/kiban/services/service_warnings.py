"""What a service asks for that will not happen as written, told when it is applied.

Warned of, three kinds: arguments kiban's huggingface runtime does not know (the runtime
logs and drops them, where nobody looks), container-only fields an
executor that runs replicas as local processes ignores (as for jobs), each naming the field as
written in the submitted file (an InferenceService's own paths), and what ``scaleMetric: cpu``
cannot do here. (Runtime args with which kiban's model server could never serve, and a model
path missing on this machine, are refused with the manifest's other problems:
``kiban.services.model_checks``.)
Nothing here imports the runtime's model code: the runtime's argument parser and its storage
rules are cheap to import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kiban.domain.model_storage import PVC_ROOT_ENV
from kiban.domain.service import ServiceSpec, ServiceSubmission, pvc_claim
from kiban.domain.service_replica import runtime_storage_uri
from kiban.executors.base import Capability
from kiban.services.jobs import ClusterFacts, local_executor_warning
from kiban.serving.runtime.options import unknown_options
from kiban.serving.runtime.storage import pvc_root


def runtime_arg_warnings(submission: ServiceSubmission) -> list[str]:
    """One warning per flag in a huggingface service's args that the runtime does not know."""
    spec = submission.spec
    if spec.runtime != "huggingface":
        return []
    found = []
    for index, flag, close in unknown_options(spec.args):
        path = submission.source_path(f"spec.model.args[{index}]")
        hint = f"; did you mean {close}?" if close else ""
        found.append(
            f"{path}: ignored ({flag} is not an option of kiban's huggingface runtime{hint})"
        )
    return found


def container_field_warnings(
    submission: ServiceSubmission,
    facts: ClusterFacts,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The service's container-only fields (``image``, ``volumes``, and a ``pvc://`` model,
    which needs its claim mounted) when the executor runs replicas as local processes.

    ``environ`` is the environment replicas inherit (default: this process's, which the local
    executor passes on; a spec may not set ``KIBAN_*``): a pvc:// model is read under its
    ``$KIBAN_PVC_ROOT``.
    """
    if Capability.CONTAINERS in facts.capabilities:
        return []
    spec = submission.spec
    ignored = [
        submission.source_path(f"spec.{name}")
        for name, value in (("image", spec.image), ("volumes", spec.volumes))
        if value
    ]
    if spec.runtime == "huggingface" and spec.storage_uri and pvc_claim(spec.storage_uri):
        ignored.append(_pvc_model(submission, environ))
    return local_executor_warning(ignored)


def _pvc_model(submission: ServiceSubmission, environ: Mapping[str, str] | None) -> str:
    """``spec.model.storageUri (pvc://...: ... read from <where> on this machine)``."""
    spec = submission.spec
    uri = runtime_storage_uri(spec) or ""
    found = pvc_claim(uri)
    if found is None:  # the spec mounts the claim elsewhere: the runtime reads file:// there
        where = f"{uri.removeprefix('file://')} (the volume's mountPath)"
    else:
        claim, path = found
        root = pvc_root(os.environ if environ is None else environ)
        where = f"{root / claim / path if path else root / claim} (${PVC_ROOT_ENV}/<claim>/...)"
    field = submission.source_path("spec.model.storageUri")
    return (
        f"{field} ({spec.storage_uri}: no claim is mounted; the model is read from {where} "
        "on this machine)"
    )


def scaling_warnings(spec: ServiceSpec, capabilities: frozenset[Capability]) -> list[str]:
    """What a service's scaling settings cannot do here, told when it is applied."""
    if spec.scale_metric != "cpu":
        return []
    found = []
    if spec.min_replicas == 0:
        found.append(
            "minReplicas 0 with scaleMetric cpu: one replica is kept (CPU use is read from "
            "running replicas, so cpu does not scale to zero)"
        )
    if Capability.CPU_USAGE not in capabilities:
        found.append(
            "scaleMetric cpu: this executor reports no CPU use of replicas; the service "
            "scales on concurrency"
        )
    return found
