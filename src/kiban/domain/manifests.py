"""Parse manifests (YAML or JSON) and dispatch on ``apiVersion``/``kind`` to their models.

Other manifest kinds (inference services) register here with ``register_kind``. Volcano Jobs
and the MPI Operator's MPIJobs are translated into kiban Jobs (``parse_submission``), stored
and run as such.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from kiban.domain import mpijob
from kiban.domain.errors import FieldProblem, SpecError, format_location
from kiban.domain.foreign import validation_message
from kiban.domain.jobspec import JobManifest
from kiban.domain.node_affinity import PodAffinity
from kiban.domain.service import SERVICE_KINDS, is_service
from kiban.domain.volcano import API_VERSION as VOLCANO_API
from kiban.domain.volcano import KIND as VOLCANO_KIND
from kiban.domain.volcano import is_volcano_job, source_path, translate

Converter = Callable[[dict[str, Any]], BaseModel]

_KINDS: dict[tuple[str, str], Converter] = {}


def register_kind(api_version: str, kind: str, converter: Converter) -> None:
    """Teach the parser a manifest kind; ``converter`` validates a document into a model."""
    _KINDS[(api_version, kind)] = converter


def known_kinds() -> list[str]:
    return [f"{api}/{kind}" for api, kind in sorted(_KINDS)]


def problems_from_validation(error: ValidationError) -> list[FieldProblem]:
    """Turn pydantic's errors into field problems with paths such as ``spec.tasks[0].replicas``."""
    problems = []
    for item in error.errors():
        problems.append(
            FieldProblem(format_location(tuple(item["loc"])), validation_message(dict(item)))
        )
    return problems


def json_problem(document: dict[str, Any]) -> tuple[str, str] | None:
    """Where the document holds something JSON (and so the store) cannot: the first such path.

    YAML can express values JSON cannot (``.nan``, ``.inf``, ``!!binary``, dates, non-string
    keys); the manifest is stored as JSON, so these are refused at submission.
    """
    stack: list[tuple[str, Any]] = [("", document)]  # iterative: documents can nest deeply
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                if not isinstance(key, str):
                    return where, f"key {key!r} is not a string"
                stack.append((f"{where}.{key}" if where else key, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(value))))
        elif isinstance(value, float):
            if not math.isfinite(value):
                return where, f"{value} is not a finite number"
        elif not isinstance(value, str | int | bool) and value is not None:
            return where, f"a {type(value).__name__} value cannot be stored; use a string"
    return None


def load_document(text: str) -> dict[str, Any]:
    """Read one YAML or JSON document into a mapping, or raise a SpecError saying why not."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError.single("", f"not valid YAML or JSON{where}: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError.single(
            "", "a manifest must be a mapping with apiVersion, kind, metadata, spec"
        )
    return data


def parse_manifest(doc: dict[str, Any]) -> BaseModel:
    """Validate a manifest mapping into the model its ``apiVersion`` and ``kind`` name."""
    api_version = doc.get("apiVersion")
    kind = doc.get("kind")
    if not isinstance(api_version, str):
        raise SpecError.single("apiVersion", "required, e.g. kiban/v1")
    if not isinstance(kind, str):
        raise SpecError.single("kind", "required, e.g. Job")
    converter = _KINDS.get((api_version, kind))
    if converter is None:
        if not any(api == api_version for api, _ in _KINDS):
            raise SpecError.single(
                "apiVersion",
                f"unknown apiVersion {api_version!r}; known: {', '.join(known_kinds())}",
            )
        raise SpecError.single(
            "kind", f"unknown kind {kind!r} for {api_version}; known: {', '.join(known_kinds())}"
        )
    try:
        return converter(doc)
    except ValidationError as exc:
        raise SpecError(problems_from_validation(exc)) from None


def parse_job_manifest(doc: dict[str, Any]) -> JobManifest:
    """Parse a manifest that must describe a job."""
    model = parse_manifest(doc)
    if not isinstance(model, JobManifest):
        raise SpecError.single("kind", f"expected a job manifest, got {doc.get('kind')!r}")
    return model


@dataclass(frozen=True)
class JobSubmission:
    """A job manifest as submitted: the model, the document to store (``kiban/v1``: a Volcano
    Job is stored translated), warnings for the submitter, and the field paths of the file."""

    manifest: JobManifest
    document: dict[str, Any]
    warnings: tuple[str, ...] = ()
    paths: tuple[tuple[str, str], ...] = ()
    pod_affinities: tuple[PodAffinity, ...] | None = None  # a translation's reading

    def source_path(self, path: str) -> str:
        """Where a field of the kiban manifest was written in the submitted file."""
        return source_path(self.paths, path)

    def pod_affinity(self, index: int) -> PodAffinity:
        """What task ``index``'s pod (anti-)affinity means, read against the labels its pods
        carry where the file was written for (a translated file's own, else kiban's)."""
        if self.pod_affinities is not None:
            return self.pod_affinities[index]
        return self.manifest.pod_affinity(index)


def parse_submission(doc: dict[str, Any]) -> JobSubmission:
    """Parse a submitted job manifest of any job kind kiban reads."""
    if is_service(doc):
        raise SpecError.single(
            "kind", f"a {doc.get('kind')} is run with `kiban serve`; `kiban submit` takes a Job"
        )
    if is_volcano_job(doc):
        translation = translate(doc)
        return JobSubmission(
            translation.manifest,
            translation.document,
            translation.warnings,
            translation.paths,
            translation.pod_affinities,
        )
    if mpijob.is_mpijob(doc):
        translation = mpijob.translate(doc)
        return JobSubmission(
            translation.manifest,
            translation.document,
            translation.warnings,
            translation.paths,
            translation.pod_affinities,
        )
    return JobSubmission(parse_job_manifest(doc), doc)


register_kind("kiban/v1", "Job", JobManifest.model_validate)
register_kind(VOLCANO_API, VOLCANO_KIND, lambda doc: translate(doc).manifest)
register_kind(mpijob.API_VERSION, mpijob.KIND, lambda doc: mpijob.translate(doc).manifest)
_KINDS.update(SERVICE_KINDS)  # kiban/v1 Service and KServe's InferenceService (service.py)
