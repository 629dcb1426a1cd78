"""kiban's ``Service`` kind: a long-running model server with replicas, revisions and traffic.

``ServiceSpec`` is the normalized spec the rest of kiban uses, whichever kind was submitted: a
``kiban/v1`` Service (``ServiceManifest``) or a KServe InferenceService (translated in
``kserve``). Field rules are shared with the Job model (``jobspec``); rules across fields
(a runtime's required fields, replica bounds) are one function, ``service_problems``, reported
with the path of the field as written in the submitted file.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kiban.domain import kserve
from kiban.domain.errors import FieldProblem, SpecError, format_location
from kiban.domain.foreign import validation_message
from kiban.domain.jobspec import ObjectMeta, Resources, SpecModel, TaskSpec, VolumeSpec
from kiban.domain.jobspec import check_dns_label as _dns_label
from kiban.domain.quantity import parse_duration
from kiban.domain.volcano import is_volcano_job, source_path

API_VERSION = "kiban/v1"
KIND = "Service"
DEFAULT_READINESS_PATH = "/v2/health/ready"  # the Open Inference Protocol's readiness endpoint
MAX_REPLICAS = 100
STORAGE_SCHEMES = ("file", "pvc", "hf")
_DEFER = "defer_cross_field_checks"  # validation context: report cross-field rules with paths

Runtime = Literal["huggingface", "custom"]
Task = Literal["auto", "text_generation", "text_embedding"]
ScaleMetric = Literal["concurrency", "rps", "cpu"]

MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}$")
MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
HF_URI = re.compile(
    r"^hf://[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*([@:][A-Za-z0-9._/-]+)?$"
)
URL_PATH = re.compile(r"^/[^\s?#]*$")


def check_storage_uri(value: str) -> str:
    """``file:///abs/path``, ``pvc://claim[/path]`` or ``hf://org/name[@rev]``; else ValueError.

    A KServe-style ``hf://org/name:rev`` is accepted as well (users paste theirs).
    """
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in STORAGE_SCHEMES:
        raise ValueError(
            f"storageUri {value!r}: unsupported scheme; kiban reads "
            "file:///absolute/path, pvc://claim/path and hf://org/name[@revision]"
        )
    if "\x00" in value or any(c.isspace() for c in value):
        raise ValueError(f"storageUri {value!r} must not contain spaces")
    if scheme == "file":
        if not rest.startswith("/"):
            raise ValueError(
                f"storageUri {value!r}: a file path must be absolute (file:///path/to/model)"
            )
    elif scheme == "pvc":
        claim = urlsplit(value).netloc
        _dns_label(claim, "storageUri claim")
    elif not HF_URI.match(value):
        raise ValueError(
            f"storageUri {value!r} must look like hf://org/name, hf://org/name@rev or "
            "hf://org/name:rev"
        )
    return value


def pvc_claim(storage_uri: str) -> tuple[str, str] | None:
    """The claim and the path inside it of a ``pvc://`` URI (None for other schemes)."""
    if not storage_uri.startswith("pvc://"):
        return None
    claim, _, path = storage_uri.removeprefix("pvc://").partition("/")
    return claim, path


def _model_id(value: str) -> str:
    if not MODEL_ID.match(value) or len(value) > 256:
        raise ValueError(f"modelId {value!r} must be a Hugging Face id such as org/name")
    return value


def _model_name(value: str) -> str:
    if not MODEL_NAME.match(value):
        raise ValueError(
            f"model name {value!r} must be letters, digits and . _ : / -, "
            "start with a letter or digit, at most 253 characters"
        )
    return value


def _url_path(value: str) -> str:
    if not URL_PATH.match(value) or len(value) > 1024:
        raise ValueError(f"{value!r} must be an absolute URL path such as /healthz")
    return value


def _seconds(value: Any) -> float:
    return parse_duration(value)


def _queue(value: str) -> str:
    return _dns_label(value, "queue name")


# Field types shared by the manifest and the normalized spec; the Job's rules where they exist.
QueueName = Annotated[str, AfterValidator(_queue)]
ModelName = Annotated[str, AfterValidator(_model_name)]
ModelId = Annotated[str, AfterValidator(_model_id)]
StorageUri = Annotated[str, AfterValidator(check_storage_uri)]
Args = Annotated[list[str], AfterValidator(TaskSpec._args), Field(max_length=256)]
Command = Annotated[list[str], Field(min_length=1), AfterValidator(TaskSpec._command)]
UrlPath = Annotated[str, AfterValidator(_url_path)]
Port = Annotated[int, Field(ge=1, le=65535)]
Image = Annotated[str | None, AfterValidator(TaskSpec._image)]
Env = Annotated[
    dict[str, str], BeforeValidator(TaskSpec._env_strings), AfterValidator(TaskSpec._env)
]
Volumes = Annotated[
    list[VolumeSpec], Field(max_length=64), AfterValidator(TaskSpec._unique_volumes)
]
MinReplicas = Annotated[int, Field(ge=0, le=MAX_REPLICAS)]
MaxReplicas = Annotated[int, Field(ge=1, le=MAX_REPLICAS)]
ScaleTarget = Annotated[float, Field(gt=0, le=1e9)]
CanaryPercent = Annotated[int, Field(ge=0, le=100)]
ContainerConcurrency = Annotated[int, Field(ge=0, le=10_000)]
Timeout = Annotated[float, BeforeValidator(_seconds), Field(gt=0, le=86400)]


class _ServiceFields(SpecModel):
    """What a Service manifest's spec and the normalized spec (``ServiceSpec``) both carry,
    written the same in each: queue and class, the container, scaling and traffic."""

    queue: QueueName = "default"
    priority_class: str | None = Field(default=None, min_length=1, max_length=253)
    command: Command | None = None
    port: Port | None = None
    image: Image = None
    env: Env = Field(default_factory=dict)
    volumes: Volumes = Field(default_factory=list)
    resources: Resources = Resources()
    min_replicas: MinReplicas = 1
    max_replicas: MaxReplicas = 1
    scale_metric: ScaleMetric = "concurrency"
    scale_target: ScaleTarget | None = None
    canary_traffic_percent: CanaryPercent | None = None
    # Requests one replica is sent at once (KServe's and Knative's containerConcurrency); more
    # wait in the router's queue. 0: no limit (the model server batches what it gets).
    container_concurrency: ContainerConcurrency = 0
    public: bool = False


class ServiceSpec(_ServiceFields):
    """What kiban runs for a service, whichever kind was submitted.

    ``runtime`` huggingface runs kiban's model server on ``storage_uri`` (or ``model_id``);
    custom runs ``command`` (then ``args``), which serves HTTP on ``port`` (kiban sets ``PORT``
    to it) or, without a port, on ``$MASTER_PORT``, and answers ``readiness_path`` when ready.
    """

    model_config = ConfigDict(populate_by_name=True)

    runtime: Runtime
    model_name: ModelName
    storage_uri: StorageUri | None = None
    model_id: ModelId | None = None
    task: Task = "auto"
    args: Args = Field(default_factory=list)
    readiness_path: UrlPath = DEFAULT_READINESS_PATH
    timeout_s: Timeout = 600.0

    @model_validator(mode="after")
    def _cross_fields(self, info: ValidationInfo) -> Self:
        if not (info.context or {}).get(_DEFER):
            problems = service_problems(self)
            if problems:
                raise ValueError("; ".join(f"{p.field}: {p.message}" for p in problems))
        return self

    def to_document(self) -> dict[str, Any]:
        """A JSON form (camelCase) that ``ServiceSpec.model_validate`` reads back unchanged
        (CPU is written as ``"1500m"``, as ``Resources`` dumps it)."""
        return self.model_dump(mode="json", by_alias=True)

    def with_revision(self, revision: ServiceSpec) -> ServiceSpec:
        """This spec's policy (scaling, timeout, ...) with a revision's own template: what
        applies to that revision's replicas while this is the service's newest spec."""
        return self.model_copy(update={name: getattr(revision, name) for name in REVISION_FIELDS})

    def template_key(self) -> str:
        """A stable hash of what defines a revision: a change to any of these fields starts a new
        revision (new replicas); scaling, the canary split, the timeout and ``public`` do not."""
        fields = self.model_dump(mode="json", include=set(REVISION_FIELDS))
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# The fields that define a revision (``template_key``); the others are the service's policy.
REVISION_FIELDS = frozenset(
    {"runtime", "model_name", "storage_uri", "model_id", "task", "args", "command"}
    | {"readiness_path", "port", "image", "env", "volumes", "resources"}
    | {"priority_class", "queue"}
)


@dataclass(frozen=True)
class CrossFieldProblem:
    """A rule across fields broken: the field to blame (a ServiceSpec field), the message, and
    every field the rule reads (it is not judged when one of them is itself invalid)."""

    field: str
    message: str
    reads: frozenset[str]


def service_problems(spec: ServiceSpec) -> list[CrossFieldProblem]:
    """Rules across fields, every one broken; empty when the spec is sound."""
    problems = []

    def broken(field: str, message: str, *reads: str) -> None:
        problems.append(CrossFieldProblem(field, message, frozenset({field, *reads})))

    if spec.runtime == "huggingface":
        if spec.storage_uri is None and spec.model_id is None:
            broken(
                "storage_uri",
                "required for runtime huggingface: a storageUri or a modelId",
                "runtime",
                "model_id",
            )
        if spec.command is not None:
            broken(
                "command",
                "only for runtime custom (huggingface runs kiban's model server)",
                "runtime",
            )
        if spec.port is not None:
            broken(
                "port",
                "only for runtime custom (huggingface listens on the port kiban gives)",
                "runtime",
            )
    elif spec.command is None:
        broken("command", "required for runtime custom: the command that serves HTTP", "runtime")
    if spec.max_replicas < spec.min_replicas:
        broken(
            "max_replicas",
            f"maxReplicas ({spec.max_replicas}) is less than minReplicas ({spec.min_replicas})",
            "min_replicas",
        )
    if spec.scale_metric == "cpu" and spec.resources.cpu <= 0:
        broken(
            "resources",
            "scaleMetric cpu needs a CPU request: its target is a percentage of it",
            "scale_metric",
        )
    if spec.port is not None and "PORT" in spec.env:
        broken("env", f"PORT is set by kiban to the service's port ({spec.port})", "port")
    return problems


class ModelSection(SpecModel):
    """``spec.model``: the served name, where the weights are, the task and the runtime's args."""

    name: ModelName | None = None
    storage_uri: StorageUri | None = None
    model_id: ModelId | None = None
    task: Task = "auto"
    args: Args = Field(default_factory=list)


class ServiceManifestSpec(_ServiceFields):
    """The ``spec`` of a ``kiban/v1`` Service, as users write it (see ``ServiceSpec``)."""

    runtime: Runtime = "huggingface"
    model: ModelSection = ModelSection()
    readiness_path: UrlPath | None = None
    timeout: Timeout = 600.0


class ServiceManifest(SpecModel):
    """A whole ``apiVersion: kiban/v1``, ``kind: Service`` document."""

    api_version: Literal["kiban/v1"]
    kind: Literal["Service"]
    metadata: ObjectMeta
    spec: ServiceManifestSpec

    def service_spec(self) -> ServiceSpec:
        """The normalized spec; SpecError names manifest paths (``spec.model.storageUri``)."""
        spec, problems = self.checked_spec()
        if problems:
            raise SpecError(problems)
        return spec

    def checked_spec(
        self, invalid: frozenset[str] = frozenset()
    ) -> tuple[ServiceSpec, list[FieldProblem]]:
        """The normalized spec and every rule across fields it breaks, with manifest paths;
        ``invalid``: manifest paths found invalid (left at their defaults), whose rules are not
        judged."""
        spec, model = self.spec, self.spec.model
        data: dict[str, Any] = {name: getattr(spec, name) for name in _ServiceFields.model_fields}
        data["runtime"] = spec.runtime
        data |= {
            "model_name": model.name or self.metadata.name,
            "storage_uri": model.storage_uri,
            "model_id": model.model_id,
            "task": model.task,
            "args": model.args,
            "timeout_s": spec.timeout,
            "readiness_path": spec.readiness_path or DEFAULT_READINESS_PATH,
        }
        service = ServiceSpec.model_validate(data, context={_DEFER: True})
        problems = [
            FieldProblem(manifest_path(p.field), p.message)
            for p in service_problems(service)
            if not any(_within(manifest_path(field), invalid) for field in p.reads)
        ]
        if (
            spec.runtime == "custom"
            and spec.readiness_path is None
            and not _within("spec.runtime", invalid)
            and not _within("spec.readinessPath", invalid)
        ):
            problems.append(
                FieldProblem(
                    "spec.readinessPath",
                    "required for runtime custom: the path that answers 200 when the server "
                    "is ready, e.g. /healthz",
                )
            )
        return service, problems


# Where a ServiceSpec field is written in a kiban Service manifest (others: spec.<camelCase>).
MANIFEST_PATHS = {
    "model_name": "spec.model.name",
    "storage_uri": "spec.model.storageUri",
    "model_id": "spec.model.modelId",
    "task": "spec.model.task",
    "args": "spec.model.args",
    "timeout_s": "spec.timeout",
}


def manifest_path(field: str) -> str:
    """Where a ServiceSpec field is written in a kiban Service manifest."""
    return MANIFEST_PATHS.get(field, "spec." + to_camel(field))


def _within(path: str, invalid: frozenset[str]) -> bool:
    """Whether ``path`` is one of ``invalid`` or inside one of them."""
    return any(path == bad or path.startswith((bad + ".", bad + "[")) for bad in invalid)


@dataclass(frozen=True)
class ServiceSubmission:
    """A service as submitted: its name, the normalized spec, the ``kiban/v1`` document to store
    (an InferenceService is stored translated), warnings for the submitter, and the field paths
    of the submitted file (``kserve.Translation.paths``; none for a kiban Service)."""

    name: str
    spec: ServiceSpec
    document: dict[str, Any]
    warnings: tuple[str, ...] = ()
    paths: tuple[tuple[str, str], ...] = ()

    def source_path(self, path: str) -> str:
        """Where a field of the kiban Service manifest (``spec.model.args[2]``) was written in
        the submitted file."""
        return source_path(self.paths, path)


def is_service(document: Mapping[str, Any]) -> bool:
    """Whether a document is one of the service kinds ``kiban serve`` reads."""
    return (document.get("apiVersion"), document.get("kind")) in (
        (API_VERSION, KIND),
        (kserve.API_VERSION, kserve.KIND),
    )


@dataclass(frozen=True)
class SpecCheck:
    """A check of the normalized spec made outside the domain (the model server's args, the
    model's path), returning problems with manifest paths (``spec.model.args[2]``); it is not
    run when a field it ``reads`` (a manifest path) is itself invalid."""

    reads: tuple[str, ...]
    run: Callable[[ServiceSpec], list[FieldProblem]]


def parse_service_submission(
    doc: dict[str, Any], checks: Sequence[SpecCheck] = ()
) -> ServiceSubmission:
    """Parse a kiban Service or a KServe InferenceService; SpecError names the file's fields,
    every problem at once: the fields', the rules' across fields (judged on the fields that are
    valid), then those of ``checks``."""
    warnings: tuple[str, ...] = ()
    paths: tuple[tuple[str, str], ...] = ()
    problems: list[FieldProblem] = []
    if kserve.is_inference_service(doc):
        translation = kserve.translate(doc)
        problems = list(translation.problems)
        document, warnings, paths = translation.document, translation.warnings, translation.paths
    elif (doc.get("apiVersion"), doc.get("kind")) == (API_VERSION, KIND):
        document = doc
    elif is_volcano_job(doc) or (doc.get("apiVersion"), doc.get("kind")) == (API_VERSION, "Job"):
        raise SpecError.single(
            "kind", "a Job is submitted with `kiban submit`; `kiban serve` takes a Service"
        )
    else:
        raise SpecError.single(
            "kind",
            f"expected {API_VERSION} Service or {kserve.API_VERSION} {kserve.KIND}, got "
            f"{doc.get('apiVersion')!r} {doc.get('kind')!r}",
        )
    manifest, found = check_manifest(document, checks)
    reported = frozenset(p.field for p in problems)
    for problem in found:  # a field the translation found wrong is told once, as it said
        field = source_path(paths, problem.field)
        if not _within(field, reported):
            problems.append(FieldProblem(field, problem.message))
    if problems or manifest is None:
        raise SpecError(problems)
    spec = manifest.service_spec()
    return ServiceSubmission(manifest.metadata.name, spec, document, warnings, paths)


def check_manifest(
    document: dict[str, Any], checks: Sequence[SpecCheck] = ()
) -> tuple[ServiceManifest | None, list[FieldProblem]]:
    """A ``kiban/v1`` Service document's manifest (None when it has problems) and every one of
    its problems, with kiban paths: the fields', then the rules' across fields on the fields
    that are valid (each invalid one left at its default), then the ``checks``'."""
    invalid: frozenset[str] = frozenset()
    try:
        manifest = ServiceManifest.model_validate(document)
        problems: list[FieldProblem] = []
    except ValidationError as exc:
        errors = exc.errors()
        problems = [
            FieldProblem(format_location(tuple(e["loc"])), validation_message(e)) for e in errors
        ]
        pruned, invalid = _without_invalid(document, [tuple(e["loc"]) for e in errors])
        try:
            manifest = ServiceManifest.model_validate(pruned)
        except ValidationError:
            return None, problems  # a required field is among the invalid ones
    spec, crossing = manifest.checked_spec(invalid)
    problems += crossing
    for check in checks:
        if not any(_within(path, invalid) for path in check.reads):
            problems += check.run(spec)
    return (None if problems else manifest), problems


def _without_invalid(
    document: dict[str, Any], locations: list[tuple[int | str, ...]]
) -> tuple[dict[str, Any], frozenset[str]]:
    """The document without the ``spec`` (and ``spec.model``) fields that hold an invalid value,
    and their paths; an invalid name becomes a valid stand-in."""
    pruned = copy.deepcopy(document)
    removed: set[str] = set()
    for loc in locations:
        if loc[:1] == ("metadata",) and isinstance(pruned.get("metadata"), dict):
            pruned["metadata"] = {"name": "invalid"}
            removed.add("metadata")
        if loc[:1] != ("spec",) or len(loc) < 2 or not isinstance(pruned.get("spec"), dict):
            continue
        spec, key = pruned["spec"], loc[1]
        if key == "model" and len(loc) >= 3 and isinstance(spec.get("model"), dict):
            spec["model"].pop(loc[2], None)
            removed.add(f"spec.model.{loc[2]}")
        else:
            spec.pop(key, None)
            removed.add(f"spec.{key}")
    return pruned, frozenset(removed)


def service_manifest(doc: dict[str, Any]) -> ServiceManifest:
    """The ``kiban/v1`` Service a document of either service kind stands for (fully checked)."""
    return ServiceManifest.model_validate(parse_service_submission(doc).document)


# For manifests.register_kind: both kinds validate into the kiban/v1 Service they stand for.
SERVICE_KINDS = {
    (API_VERSION, KIND): service_manifest,
    (kserve.API_VERSION, kserve.KIND): service_manifest,
}
