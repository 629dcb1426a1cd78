"""kiban's Service kind: the normalized spec, what each manifest field becomes, what is refused
and where, which changes make a new revision, and how job and service parsing tell them apart."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kiban.domain.errors import FieldProblem, SpecError
from kiban.domain.manifests import load_document, parse_manifest, parse_submission
from kiban.domain.service import (
    DEFAULT_READINESS_PATH,
    ServiceManifest,
    ServiceSpec,
    SpecCheck,
    parse_service_submission,
)

GI = 2**30
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "serving"

EMBEDDER = """
apiVersion: kiban/v1
kind: Service
metadata: {name: embedder}
spec:
  queue: research
  priorityClass: serving
  model:
    name: minilm
    storageUri: "file:///models/minilm"
    task: text_embedding
    args: ["--dtype", "float32"]
  resources: {gpu: 0, cpu: 1, memory: 2Gi}
  env: {HF_HOME: /cache/hf}
  minReplicas: 1
  maxReplicas: 3
  scaleMetric: concurrency
  scaleTarget: 4
  canaryTrafficPercent: 20
  timeout: 10m
  public: false
"""

CUSTOM = """
apiVersion: kiban/v1
kind: Service
metadata: {name: echo}
spec:
  runtime: custom
  command: ["python", "-m", "http.server"]
  model: {args: ["8000"]}
  readinessPath: /
  port: 8000
  maxReplicas: 2
"""


def doc(text: str = EMBEDDER, **spec: Any) -> dict[str, Any]:
    """The manifest with top-level spec fields replaced (None removes one)."""
    data = copy.deepcopy(load_document(text))
    for key, value in spec.items():
        if value is None:
            data["spec"].pop(key, None)
        else:
            data["spec"][key] = value
    return data


def model(**fields: Any) -> dict[str, Any]:
    section = copy.deepcopy(load_document(EMBEDDER)["spec"]["model"])
    section.update(fields)
    return {k: v for k, v in section.items() if v is not None}


def problems(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse_service_submission(document)
    return {p.field: p.message for p in caught.value.problems}


def test_every_field_of_the_documented_example_reaches_the_spec() -> None:
    submission = parse_service_submission(doc())
    spec = submission.spec
    assert submission.name == "embedder"
    assert submission.warnings == ()
    assert submission.document == doc()
    assert (spec.queue, spec.priority_class, spec.runtime) == ("research", "serving", "huggingface")
    assert (spec.model_name, spec.storage_uri, spec.model_id) == (
        "minilm",
        "file:///models/minilm",
        None,
    )
    assert (spec.task, spec.args) == ("text_embedding", ["--dtype", "float32"])
    assert (spec.resources.gpu, spec.resources.cpu, spec.resources.memory) == (0, 1000, 2 * GI)
    assert spec.env == {"HF_HOME": "/cache/hf"}
    assert (spec.min_replicas, spec.max_replicas) == (1, 3)
    assert (spec.scale_metric, spec.scale_target, spec.canary_traffic_percent) == (
        "concurrency",
        4.0,
        20,
    )
    assert spec.timeout_s == 600.0
    assert spec.public is False
    assert spec.readiness_path == DEFAULT_READINESS_PATH


def test_defaults_and_the_served_name_falling_back_to_the_service_name() -> None:
    minimal = {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": "opt"},
        "spec": {"model": {"modelId": "facebook/opt-125m"}},
    }
    spec = parse_service_submission(minimal).spec
    assert spec.model_name == "opt"
    assert spec.model_id == "facebook/opt-125m"
    assert (spec.queue, spec.priority_class, spec.task) == ("default", None, "auto")
    assert (spec.min_replicas, spec.max_replicas, spec.timeout_s, spec.public) == (1, 1, 600, False)


def test_custom_runtime() -> None:
    spec = parse_service_submission(load_document(CUSTOM)).spec
    assert spec.runtime == "custom"
    assert spec.command == ["python", "-m", "http.server"]
    assert spec.args == ["8000"]
    assert (spec.readiness_path, spec.port) == ("/", 8000)


@pytest.mark.parametrize(
    ("uri", "accepted"),
    [
        ("file:///models/minilm", True),
        ("pvc://model-store/llama/8b", True),
        ("pvc://model-store", True),
        ("hf://facebook/opt-125m", True),
        ("hf://facebook/opt-125m@main", True),
        ("hf://meta-llama/meta-llama-3-8b-instruct:a1b2c3", True),  # KServe writes :hash
        ("file://models/minilm", False),  # relative
        ("s3://bucket/model", False),
        ("gs://kfserving-examples/models/sklearn", False),
        ("/models/minilm", False),
        ("pvc://Model_Store/x", False),  # not a DNS label
        ("hf://opt-125m", False),  # no organisation
        ("file:///models/with space", False),
    ],
)
def test_storage_uri_schemes(uri: str, accepted: bool) -> None:
    document = doc(model=model(storageUri=uri))
    if accepted:
        assert parse_service_submission(document).spec.storage_uri == uri
    else:
        assert list(problems(document)) == ["spec.model.storageUri"]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"modle": {}}, "spec.modle", "unknown field (check its spelling)"),
        ({"model": model(storageUri="s3://b/m")}, "spec.model.storageUri", "unsupported scheme"),
        ({"model": model(storageUri="file://m")}, "spec.model.storageUri", "must be absolute"),
        ({"model": model(storagUri="file:///m")}, "spec.model.storagUri", "unknown field"),
        ({"model": model(task="translation")}, "spec.model.task", "'text_embedding'"),
        ({"minReplicas": 5}, "spec.maxReplicas", "maxReplicas (3) is less than minReplicas (5)"),
        ({"minReplicas": -1}, "spec.minReplicas", "greater than or equal to 0"),
        ({"maxReplicas": 0}, "spec.maxReplicas", "greater than or equal to 1"),
        ({"maxReplicas": 101}, "spec.maxReplicas", "less than or equal to 100"),
        ({"canaryTrafficPercent": 150}, "spec.canaryTrafficPercent", "less than or equal to 100"),
        ({"scaleTarget": 0}, "spec.scaleTarget", "greater than 0"),
        ({"scaleMetric": "memory"}, "spec.scaleMetric", "'concurrency', 'rps' or 'cpu'"),
        ({"timeout": "ten minutes"}, "spec.timeout", "is not a duration"),
        ({"timeout": 0}, "spec.timeout", "greater than 0"),
        ({"resources": {"gpu": 1.5}}, "spec.resources.gpu", "GPUs are whole numbers"),
        ({"resources": {"memory": "lots"}}, "spec.resources.memory", "not a memory quantity"),
        ({"env": {"MASTER_PORT": "1"}}, "spec.env", "set by kiban"),
        ({"env": {"1BAD": "x"}}, "spec.env", "not a valid environment variable name"),
        ({"queue": "Team A"}, "spec.queue", "queue name"),
        ({"image": "has space"}, "spec.image", "without spaces"),
        ({"public": "maybe"}, "spec.public", "valid boolean"),
        ({"command": ["serve"]}, "spec.command", "only for runtime custom"),
        ({"port": 8000}, "spec.port", "only for runtime custom"),
        ({"model": model(storageUri=None)}, "spec.model.storageUri", "a storageUri or a modelId"),
        ({"model": model(modelId="not an id")}, "spec.model.modelId", "Hugging Face id"),
        ({"model": model(name="has space")}, "spec.model.name", "model name"),
        (
            {"scaleMetric": "cpu", "resources": {"cpu": "0"}},
            "spec.resources",
            "scaleMetric cpu needs a CPU request",
        ),
        (
            {"volumes": [{"name": "a", "claimName": "c", "mountPath": "rel"}]},
            "spec.volumes[0].mountPath",
            "absolute path",
        ),
    ],
)
def test_bad_fields_are_refused_at_their_path(
    change: dict[str, Any], field: str, message: str
) -> None:
    found = problems(doc(**change))
    assert field in found, found
    assert message in found[field]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"command": None}, "spec.command", "required for runtime custom"),
        ({"readinessPath": None}, "spec.readinessPath", "required for runtime custom"),
        ({"readinessPath": "healthz"}, "spec.readinessPath", "absolute URL path"),
        ({"port": 70000}, "spec.port", "less than or equal to 65535"),
        ({"env": {"PORT": "9"}}, "spec.env", "PORT is set by kiban"),
        ({"command": []}, "spec.command", "at least 1 item"),
    ],
)
def test_custom_runtime_rules(change: dict[str, Any], field: str, message: str) -> None:
    found = problems(doc(CUSTOM, **change))
    assert field in found, found
    assert message in found[field]


def test_every_problem_is_reported_at_once() -> None:
    found = problems(doc(canaryTrafficPercent=150, resources={"gpu": 1.5}, extra=1))
    assert set(found) == {"spec.canaryTrafficPercent", "spec.resources.gpu", "spec.extra"}


def all_problems(document: dict[str, Any], **kwargs: Any) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        parse_service_submission(document, **kwargs)
    return [(p.field, p.message) for p in caught.value.problems]


def test_field_and_cross_field_problems_come_in_one_answer() -> None:
    """The issue's case: a bad scaleTarget and maxReplicas below minReplicas, told together."""
    found = all_problems(doc(scaleTarget=0, minReplicas=3, maxReplicas=2, port=8000))
    assert found == [
        ("spec.scaleTarget", "Input should be greater than 0"),
        ("spec.port", "only for runtime custom (huggingface listens on the port kiban gives)"),
        ("spec.maxReplicas", "maxReplicas (2) is less than minReplicas (3)"),
    ]


def test_a_rule_is_not_judged_on_a_field_that_is_itself_invalid() -> None:
    # maxReplicas 500 is out of range: "less than minReplicas" would be about the default
    assert all_problems(doc(minReplicas=3, maxReplicas=500)) == [
        ("spec.maxReplicas", "Input should be less than or equal to 100")
    ]
    # an invalid runtime: its rules (command, port...) are not judged on the default one
    assert [f for f, _ in all_problems(doc(runtime="triton", port=80))] == ["spec.runtime"]


def test_checks_from_outside_the_domain_join_the_answer() -> None:
    def refuse_bad_args(spec: ServiceSpec) -> list[FieldProblem]:
        return [
            FieldProblem(f"spec.model.args[{i}]", f"{arg} refused")
            for i, arg in enumerate(spec.args)
            if arg.startswith("--bad")
        ]

    check = [SpecCheck(reads=("spec.model.args",), run=refuse_bad_args)]

    document = doc(maxReplicas=0, model=model(args=["--dtype", "float32", "--bad", "--bad2"]))
    assert all_problems(document, checks=check) == [
        ("spec.maxReplicas", "Input should be greater than or equal to 1"),
        ("spec.model.args[2]", "--bad refused"),
        ("spec.model.args[3]", "--bad2 refused"),
    ]
    # not run on a field that is itself invalid
    assert all_problems(doc(model=model(args="--bad")), checks=check) == [
        ("spec.model.args", "Input should be a valid list")
    ]


def test_normalized_spec_checks_its_own_cross_field_rules() -> None:
    with pytest.raises(ValidationError, match="maxReplicas \\(1\\) is less than minReplicas"):
        ServiceSpec(runtime="huggingface", model_name="m", model_id="o/m", min_replicas=2)
    with pytest.raises(ValidationError, match="required for runtime custom"):
        ServiceSpec(runtime="custom", model_name="m")
    with pytest.raises(ValidationError, match="frozen"):
        spec = ServiceSpec(runtime="huggingface", model_name="m", model_id="o/m")
        spec.min_replicas = 3  # type: ignore[misc]


def test_scale_to_zero_is_allowed_but_max_stays_at_least_one() -> None:
    spec = parse_service_submission(doc(minReplicas=0, maxReplicas=1)).spec
    assert (spec.min_replicas, spec.max_replicas) == (0, 1)


# -- revisions -----------------------------------------------------------------------------

BASE = ServiceSpec(
    runtime="huggingface",
    model_name="minilm",
    storage_uri="file:///models/minilm",
    task="text_embedding",
    args=["--dtype", "float32"],
    env={"HF_HOME": "/cache/hf"},
    max_replicas=3,
)

REVISION_CHANGES: list[dict[str, Any]] = [
    {"model_name": "other"},
    {"storage_uri": "hf://sentence-transformers/all-minilm-l6-v2"},
    {"model_id": "org/model"},
    {"task": "auto"},
    {"args": ["--dtype", "float16"]},
    {"args": []},
    {"env": {"HF_HOME": "/tmp"}},
    {"env": {}},
    {"image": "registry.example/serve:2"},
    {"resources": {"gpu": 1}},
    {"resources": {"memory": "4Gi"}},
    {"volumes": [{"name": "cache", "claimName": "hf-cache", "mountPath": "/cache"}]},
    {"priority_class": "high"},
    {"queue": "other"},
    {"readiness_path": "/ready"},
]
POLICY_CHANGES: list[dict[str, Any]] = [
    {"min_replicas": 0},
    {"max_replicas": 10},
    {"scale_metric": "rps"},
    {"scale_target": 12.5},
    {"canary_traffic_percent": 10},
    {"timeout_s": 30},
    {"public": True},
]


def changed(spec: ServiceSpec, **fields: Any) -> ServiceSpec:
    by_alias = {ServiceSpec.model_fields[k].alias or k: v for k, v in fields.items()}
    return ServiceSpec.model_validate(spec.to_document() | by_alias)


def test_the_json_form_reads_back_unchanged() -> None:
    spec = parse_service_submission(
        doc(
            resources={"gpu": 2, "cpu": "1500m", "memory": "3Gi"},
            volumes=[{"name": "cache", "claimName": "hf", "mountPath": "/cache", "readOnly": True}],
        )
    ).spec
    assert ServiceSpec.model_validate(spec.to_document()) == spec


def test_template_key_is_stable_and_independent_of_how_the_spec_was_built() -> None:
    again = changed(BASE)
    assert again.template_key() == BASE.template_key()
    from_manifest = parse_service_submission(
        doc(queue="default", priorityClass=None, minReplicas=1, maxReplicas=3)
    ).spec
    assert from_manifest.template_key() == changed(from_manifest).template_key()
    assert len(BASE.template_key()) == 16


@pytest.mark.parametrize("change", REVISION_CHANGES, ids=lambda c: next(iter(c)))
def test_changing_what_runs_makes_a_new_revision(change: dict[str, Any]) -> None:
    assert changed(BASE, **change).template_key() != BASE.template_key()


@pytest.mark.parametrize("change", POLICY_CHANGES, ids=lambda c: next(iter(c)))
def test_changing_scaling_canary_timeout_or_exposure_keeps_the_revision(
    change: dict[str, Any],
) -> None:
    assert changed(BASE, **change).template_key() == BASE.template_key()


def test_template_keys_differ_pairwise_and_ignore_policy_combinations() -> None:
    """Property-style: every pair of distinct revision changes gives distinct keys, and any
    combination of policy changes on top leaves each key as it was."""
    keys = [changed(BASE, **c).template_key() for c in REVISION_CHANGES]
    assert len(set(keys)) == len(keys)
    policy: dict[str, Any] = {}
    for change in POLICY_CHANGES:
        policy |= change
        for revision_change, key in zip(REVISION_CHANGES, keys, strict=True):
            assert changed(BASE, **revision_change, **policy).template_key() == key


def test_custom_runtime_revision_fields() -> None:
    spec = parse_service_submission(load_document(CUSTOM)).spec
    for change in ({"command": ["python", "serve.py"]}, {"port": 9000}, {"args": []}):
        assert changed(spec, **change).template_key() != spec.template_key()


# -- the manifest parser and the job parser ---------------------------------------------------


def test_registered_with_the_manifest_parser() -> None:
    assert isinstance(parse_manifest(doc()), ServiceManifest)
    with pytest.raises(SpecError) as caught:
        parse_manifest(doc(canaryTrafficPercent=150))
    assert caught.value.problems[0].field == "spec.canaryTrafficPercent"


def test_a_service_given_to_job_submission_points_at_kiban_serve() -> None:
    with pytest.raises(SpecError, match="kiban serve") as caught:
        parse_submission(doc())
    assert caught.value.problems[0].field == "kind"


@pytest.mark.parametrize(
    "document",
    [
        {"apiVersion": "kiban/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}},
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"}},
    ],
)
def test_a_job_given_to_service_submission_points_at_kiban_submit(document: dict[str, Any]) -> None:
    assert problems(document) == {
        "kind": "a Job is submitted with `kiban submit`; `kiban serve` takes a Service"
    }


def test_unknown_kinds_are_refused() -> None:
    found = problems({"apiVersion": "apps/v1", "kind": "Deployment"})
    assert "kiban/v1 Service" in found["kind"]
    assert "InferenceService" in found["kind"]


def test_the_example_service_parses() -> None:
    text = (EXAMPLES / "embedder.yaml").read_text()
    submission = parse_service_submission(load_document(text))
    assert submission.name == "embedder"
    assert submission.spec.task == "text_embedding"


def test_the_example_chat_service_parses() -> None:
    text = (EXAMPLES / "chat.yaml").read_text()
    submission = parse_service_submission(load_document(text))
    assert (submission.name, submission.spec.task) == ("chat", "text_generation")
    assert (submission.spec.min_replicas, submission.spec.canary_traffic_percent) == (0, 20)
