"""KServe InferenceService manifests: what each field becomes in kiban's Service, what is warned
about as ignored, and what is refused, named as written in the InferenceService."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kiban.domain.errors import SpecError
from kiban.domain.kserve import TRANSLATED_ANNOTATION
from kiban.domain.manifests import load_document, parse_manifest
from kiban.domain.service import ServiceManifest, ServiceSubmission, parse_service_submission
from kiban.executors.base import Capability
from kiban.services.jobs import ClusterFacts
from kiban.services.service_warnings import container_field_warnings, runtime_arg_warnings

GI = 2**30
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "serving"

# Shaped like KServe's Hugging Face runtime examples: a served name and the model's id in args,
# a GPU in limits and requests, serverless (Knative) annotations.
LLAMA = """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: huggingface-llama3
  namespace: team-nlp
  labels:
    kiban.dev/queue: nlp
    kiban.dev/priority-class: serving
  annotations:
    serving.kserve.io/deploymentMode: Serverless
    autoscaling.knative.dev/target: "10"
    sidecar.istio.io/inject: "false"
    owner: alice
spec:
  predictor:
    serviceAccountName: hfserviceacc
    minReplicas: 0
    maxReplicas: 2
    canaryTrafficPercent: 25
    timeout: 300
    model:
      modelFormat:
        name: huggingface
      args:
        - --model_name=llama3
        - --model_id
        - meta-llama/meta-llama-3-8b-instruct
        - --max_model_len=8192
      env:
        - name: HF_TOKEN
          valueFrom:
            secretKeyRef: {name: hf-secret, key: HF_TOKEN, optional: false}
        - name: SAFETENSORS_FAST_GPU
          value: "1"
      resources:
        limits: {cpu: "6", memory: 24Gi, nvidia.com/gpu: "1"}
        requests: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "1"}
"""

# The embedding example: the task in args, a model from the Hub by storageUri, CPU only, and
# a raw deployment scaled by requests per second.
EMBEDDING = """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: huggingface-t5
  labels:
    kueue.x-k8s.io/queue-name: research
  annotations:
    serving.kserve.io/deploymentMode: RawDeployment
    serving.kserve.io/autoscalerClass: hpa
spec:
  predictor:
    scaleMetric: rps
    scaleTarget: 50
    model:
      modelFormat:
        name: huggingface
        version: "1"
      protocolVersion: v2
      args: ["--model_name", "minilm", "--task=text_embedding", "--backend=huggingface"]
      storageUri: hf://sentence-transformers/all-MiniLM-L6-v2
      resources:
        requests: {cpu: "1", memory: 2Gi}
"""

# A model on a claim, mounted as a volume as well, with tolerations and a node selector.
PVC = """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: opt-pvc
spec:
  predictor:
    nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
    model:
      modelFormat: {name: huggingface}
      storageUri: pvc://model-store/opt-125m
      volumeMounts:
        - {name: cache, mountPath: /cache}
        - {name: shm, mountPath: /dev/shm}
      resources:
        limits: {nvidia.com/gpu: 2, ephemeral-storage: 10Gi}
    volumes:
      - name: cache
        persistentVolumeClaim: {claimName: hf-cache}
      - name: shm
        emptyDir: {medium: Memory}
"""

# A custom predictor: KServe's custom-container example with a command, a port and a probe.
CUSTOM = """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: custom-model
spec:
  predictor:
    containers:
      - name: kserve-container
        image: registry.example/custom-model:v1
        command: ["python", "-m", "model"]
        args: ["--model_name=custom-model", "--http_port=8081"]
        ports:
          - containerPort: 8081
            protocol: TCP
        readinessProbe:
          httpGet: {path: /v2/models/custom-model/ready, port: 8081}
        env:
          - {name: WORKERS, value: "2"}
        resources:
          requests: {cpu: 500m, memory: 1Gi}
"""

# The older form: predictor.huggingface instead of model with a modelFormat.
LEGACY = """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: gpt2
spec:
  predictor:
    huggingface:
      args: ["--model_name=gpt2", "--model_id=openai-community/gpt2", "--task=text_generation"]
"""


def parse(text: str) -> ServiceSubmission:
    return parse_service_submission(load_document(text))


def problems(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse_service_submission(document)
    return {p.field: p.message for p in caught.value.problems}


def edit(text: str, path: str, value: Any) -> dict[str, Any]:
    """The document with the field at a dotted path (``[i]`` for list items) set (None: removed)."""
    data = copy.deepcopy(load_document(text))
    label = path.removeprefix("metadata.labels.")  # label keys hold dots
    *parents, last = ["metadata", "labels", label] if label != path else path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part[1:-1])] if part.startswith("[") else node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return data


def test_llama_example() -> None:
    submission = parse(LLAMA)
    spec = submission.spec
    assert submission.name == "huggingface-llama3"
    assert (spec.runtime, spec.model_name, spec.model_id, spec.storage_uri) == (
        "huggingface",
        "llama3",
        "meta-llama/meta-llama-3-8b-instruct",
        None,
    )
    assert spec.args == ["--max_model_len=8192"]  # the pulled-out flags become fields
    assert (spec.queue, spec.priority_class) == ("nlp", "serving")
    assert (spec.resources.gpu, spec.resources.cpu, spec.resources.memory) == (1, 4000, 16 * GI)
    assert spec.env == {"SAFETENSORS_FAST_GPU": "1"}
    assert (spec.min_replicas, spec.max_replicas, spec.canary_traffic_percent) == (0, 2, 25)
    assert spec.timeout_s == 300.0
    document = submission.document
    assert (document["apiVersion"], document["kind"]) == ("kiban/v1", "Service")
    assert document["metadata"]["annotations"] == {
        "owner": "alice",
        TRANSLATED_ANNOTATION: "serving.kserve.io/v1beta1",
    }
    ServiceManifest.model_validate(document)  # stored as a kiban Service


def test_llama_warnings_name_each_ignored_thing() -> None:
    warnings = parse(LLAMA).warnings
    for thing in (
        "metadata.namespace",
        "metadata.annotations.serving.kserve.io/deploymentMode",
        "metadata.annotations.autoscaling.knative.dev/target",
        "metadata.annotations.sidecar.istio.io/inject",
        "spec.predictor.serviceAccountName",
        "spec.predictor.model.env[0].valueFrom (HF_TOKEN)",
    ):
        assert sum(w.startswith(f"{thing}: ignored") for w in warnings) == 1, (thing, warnings)
    assert len(warnings) == 6
    assert not any("owner" in w for w in warnings)


def test_embedding_example() -> None:
    submission = parse(EMBEDDING)
    spec = submission.spec
    assert (spec.model_name, spec.task) == ("minilm", "text_embedding")
    assert spec.storage_uri == "hf://sentence-transformers/all-MiniLM-L6-v2"
    assert spec.args == ["--backend=huggingface"]
    assert spec.queue == "research"  # Kueue's label
    assert (spec.scale_metric, spec.scale_target) == ("rps", 50.0)
    assert (spec.resources.gpu, spec.resources.cpu, spec.resources.memory) == (0, 1000, 2 * GI)
    ignored = {w.split(": ignored")[0] for w in submission.warnings}
    assert ignored == {
        "metadata.annotations.serving.kserve.io/deploymentMode",
        "metadata.annotations.serving.kserve.io/autoscalerClass",
        "spec.predictor.model.modelFormat.version",
        "spec.predictor.model.protocolVersion",
    }


def test_claims_become_volumes_and_other_volumes_are_warned() -> None:
    submission = parse(PVC)
    spec = submission.spec
    assert spec.storage_uri == "pvc://model-store/opt-125m"
    assert spec.model_name == "opt-pvc"  # no --model_name: the service's name
    assert spec.resources.gpu == 2
    assert [(v.name, v.claim_name, v.mount_path, v.read_only) for v in spec.volumes] == [
        ("cache", "hf-cache", "/cache", False)
    ]
    ignored = {w.split(": ignored")[0] for w in submission.warnings}
    assert ignored == {
        "spec.predictor.nodeSelector",
        "spec.predictor.tolerations",
        "spec.predictor.volumes[1] (emptyDir)",
        "spec.predictor.model.resources.limits.ephemeral-storage",
    }


def test_custom_container() -> None:
    submission = parse(CUSTOM)
    spec = submission.spec
    assert spec.runtime == "custom"
    assert spec.command == ["python", "-m", "model"]
    assert spec.args == ["--model_name=custom-model", "--http_port=8081"]  # its own, unchanged
    assert (spec.model_name, spec.port) == ("custom-model", 8081)
    assert spec.readiness_path == "/v2/models/custom-model/ready"
    assert spec.image == "registry.example/custom-model:v1"
    assert spec.env == {"WORKERS": "2"}
    assert (spec.resources.cpu, spec.resources.memory) == (500, GI)
    assert submission.warnings == (
        "spec.predictor.containers[0].name: ignored (kiban names the container)",
    )


def test_custom_container_defaults_to_kserves_port_and_readiness() -> None:
    document = edit(CUSTOM, "spec.predictor.containers.[0].ports", None)
    document["spec"]["predictor"]["containers"][0].pop("readinessProbe")
    submission = parse_service_submission(document)
    assert (submission.spec.port, submission.spec.readiness_path) == (8080, "/v2/health/ready")
    assert any("8080" in w for w in submission.warnings)
    assert any("/v2/health/ready" in w for w in submission.warnings)


def test_legacy_huggingface_predictor() -> None:
    spec = parse(LEGACY).spec
    assert (spec.model_name, spec.model_id, spec.task, spec.args) == (
        "gpt2",
        "openai-community/gpt2",
        "text_generation",
        [],
    )


def test_a_task_kiban_lacks_is_refused_at_its_argument() -> None:
    document = edit(
        LEGACY, "spec.predictor.huggingface.args", ["--model_id=b/b", "--task=fill_mask"]
    )
    assert "'text_embedding'" in problems(document)["spec.predictor.huggingface.args[1]"]


def test_the_example_inference_service_parses() -> None:
    submission = parse((EXAMPLES / "inferenceservice.yaml").read_text())
    assert (submission.spec.model_name, submission.spec.queue) == ("qwen", "research")
    assert submission.spec.resources.gpu == 1


def test_kept_args_are_named_at_their_own_index() -> None:
    """Pulling --model_name and --model_id shifts the kept args; paths still name the file's."""
    llama = parse(LLAMA)
    assert llama.spec.args == ["--max_model_len=8192"]
    assert llama.source_path("spec.model.args[0]") == "spec.predictor.model.args[3]"
    custom = parse(CUSTOM)  # nothing pulled: the same indexes
    assert custom.source_path("spec.model.args[1]") == "spec.predictor.containers[0].args[1]"
    legacy = parse(LEGACY.replace('"--task=text_generation"', '"--dtype=fp16"'))
    assert legacy.spec.args == ["--dtype=fp16"]
    assert legacy.source_path("spec.model.args[0]") == "spec.predictor.huggingface.args[2]"


def test_unknown_runtime_args_are_warned_at_their_path() -> None:
    embedding = parse(EMBEDDING)
    assert runtime_arg_warnings(embedding) == [
        "spec.predictor.model.args[3]: ignored (--backend is not an option of kiban's "
        "huggingface runtime)"
    ]
    example = parse((EXAMPLES / "inferenceservice.yaml").read_text())
    assert runtime_arg_warnings(example) == []  # --max_model_len is --max_length's alias
    typo = parse(LLAMA.replace("--max_model_len=8192", "--max-modle-len=8192"))
    (warning,) = runtime_arg_warnings(typo)
    assert warning.startswith("spec.predictor.model.args[3]: ignored (--max-modle-len ")
    assert warning.endswith("did you mean --max-model-len?)")
    assert runtime_arg_warnings(parse(CUSTOM.replace("--http_port", "--whatever"))) == []


def test_container_fields_a_local_executor_ignores_are_named_as_written() -> None:
    pvc = parse(PVC.replace("modelFormat:", "image: registry.example/hf:v1\n      modelFormat:"))
    local = ClusterFacts(capabilities=frozenset(Capability) - {Capability.CONTAINERS})
    (warning,) = container_field_warnings(pvc, local, environ={"KIBAN_PVC_ROOT": "/srv/claims"})
    assert warning == (
        "the local executor runs each replica as a local process and ignores container-only "
        "fields: spec.predictor.model.image, spec.predictor.volumes, "
        "spec.predictor.model.storageUri (pvc://model-store/opt-125m: no claim is mounted; the "
        "model is read from /srv/claims/model-store/opt-125m ($KIBAN_PVC_ROOT/<claim>/...) on "
        "this machine)"
    )
    assert container_field_warnings(pvc, ClusterFacts(capabilities=frozenset(Capability))) == []


def test_registered_with_the_manifest_parser() -> None:
    assert isinstance(parse_manifest(load_document(LLAMA)), ServiceManifest)


def test_the_kiban_label_wins_over_kueues() -> None:
    document = edit(LLAMA, "metadata.labels.kueue.x-k8s.io/queue-name", "other")
    assert parse_service_submission(document).spec.queue == "nlp"


P = "spec.predictor"
M = "spec.predictor.model"


@pytest.mark.parametrize(
    ("text", "path", "value", "field", "message"),
    [
        (LLAMA, "spec.predictor", None, P, "required field is missing"),
        (LLAMA, "spec.predictor", "model", P, "must be a mapping"),
        (LLAMA, f"{M}.modelFormat", {"name": "sklearn"}, f"{M}.modelFormat.name", "'sklearn'"),
        (LLAMA, f"{M}.modelFormat", None, f"{M}.modelFormat.name", "required field is missing"),
        (LLAMA, f"{M}.storageUri", "s3://bucket/llama", f"{M}.storageUri", "unsupported scheme"),
        (LLAMA, f"{M}.storageUri", "file://llama", f"{M}.storageUri", "must be absolute"),
        (LLAMA, f"{M}.args", "--model_name=x", f"{M}.args", "must be a list"),
        (LLAMA, f"{M}.args", ["--model_name"], f"{M}.args[0]", "needs a value"),
        (LLAMA, f"{M}.args", ["--task=translation"], f"{M}.args[0]", "'text_embedding'"),
        (LLAMA, f"{M}.args", ["--model_id=x y"], f"{M}.args[0]", "Hugging Face id"),
        (LLAMA, f"{M}.args", ["--model_id=a/b", "--model_name", "a b"], f"{M}.args[1]",
         "model name"),
        (LLAMA, f"{M}.args", [], f"{M}.storageUri", "a storageUri or a modelId"),
        (LLAMA, f"{M}.storageUrl", "hf://a/b", f"{M}.storageUrl", "unknown field"),
        (LLAMA, f"{M}.env", {"A": "1"}, f"{M}.env", "must be a list"),
        (LLAMA, f"{M}.env", [{"name": "RANK", "value": "1"}], f"{M}.env", "set by kiban"),
        (LLAMA, f"{M}.resources.limits", {"nvidia.com/gpu": 1.5},
         f"{M}.resources.limits.nvidia.com/gpu", "GPUs are whole numbers"),
        (LLAMA, f"{M}.resources.requests.memory", "lots",
         f"{M}.resources.requests.memory", "not a memory quantity"),
        (LLAMA, f"{P}.minReplicas", 5, f"{P}.maxReplicas", "less than minReplicas (5)"),
        (LLAMA, f"{P}.canaryTrafficPercent", 150, f"{P}.canaryTrafficPercent", "100"),
        (LLAMA, f"{P}.scaleMetric", "memory", f"{P}.scaleMetric", "'concurrency', 'rps' or 'cpu'"),
        (LLAMA, f"{P}.timeout", "soon", f"{P}.timeout", "not a duration"),
        (LLAMA, f"{P}.initContainers", [{"name": "x"}], f"{P}.initContainers", "not supported"),
        (LLAMA, f"{P}.xgboost", {"storageUri": "gs://x"}, f"{P}.xgboost", "'xgboost'"),
        (LLAMA, f"{P}.minReplica", 1, f"{P}.minReplica", "unknown field"),
        (LLAMA, "spec.predicter", {}, "spec.predicter", "unknown field"),
        (LLAMA, "metadata.name", "Llama_3", "metadata.name", "lowercase"),
        (LLAMA, "metadata.labels.kiban.dev/queue", "NLP team", "metadata.labels.kiban.dev/queue",
         "queue name"),
        (LLAMA, f"{P}.containers", [{"name": "x", "command": ["serve"]}], f"{P}.containers",
         "not both"),
        (PVC, f"{M}.volumeMounts", [{"name": "nope", "mountPath": "/x"}],
         f"{M}.volumeMounts[0].name", "no volume named 'nope'"),
        (PVC, f"{M}.storageUri", "pvc://Model_Store/x", f"{M}.storageUri", "claim"),
        (CUSTOM, f"{P}.containers.[0].command", None, f"{P}.containers[0].command",
         "required by kiban"),
        (CUSTOM, f"{P}.containers.[0].ports.[0].containerPort", 0,
         f"{P}.containers[0].ports[0].containerPort", "greater than or equal to 1"),
        (CUSTOM, f"{P}.containers.[0].readinessProbe.httpGet.path", "ready",
         f"{P}.containers[0].readinessProbe.httpGet.path", "absolute URL path"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_at_the_field_written(
    text: str, path: str, value: Any, field: str, message: str
) -> None:
    found = problems(edit(text, path, value))
    assert field in found, found
    assert message in found[field]


def test_cpu_scaling_needs_a_cpu_request_named_where_it_is_written() -> None:
    document = edit(EMBEDDING, f"{P}.scaleMetric", "cpu")
    assert parse_service_submission(document).spec.scale_metric == "cpu"
    document = edit(LLAMA, f"{M}.resources.requests.cpu", "0")
    document["spec"]["predictor"]["scaleMetric"] = "cpu"
    found = problems(document)
    assert "needs a CPU request" in found[f"{M}.resources"], found


def test_unsupported_format_lists_what_is_supported() -> None:
    found = problems(edit(LLAMA, f"{M}.modelFormat", {"name": "tensorflow"}))
    assert "huggingface" in found[f"{M}.modelFormat.name"]
    assert "containers" in found[f"{M}.modelFormat.name"]


def test_a_predictor_without_model_or_containers_is_refused() -> None:
    document = edit(LLAMA, f"{M}", None)
    assert problems(document) == {
        P: "needs a model (modelFormat huggingface) or containers (a custom server)"
    }


def test_two_containers_are_refused() -> None:
    document = load_document(CUSTOM)
    containers = document["spec"]["predictor"]["containers"]
    containers.append(copy.deepcopy(containers[0]) | {"name": "sidecar"})
    assert "one container per replica" in problems(document)[f"{P}.containers"]


def test_transformer_and_explainer_are_ignored_with_a_warning() -> None:
    document = load_document(LEGACY)
    document["spec"]["transformer"] = {"containers": [{"image": "t"}]}
    document["spec"]["explainer"] = {"art": {}}
    ignored = {w.split(": ignored")[0] for w in parse_service_submission(document).warnings}
    assert ignored == {"spec.transformer", "spec.explainer"}


def test_container_concurrency_is_the_hard_limit_per_replica() -> None:
    limited = parse_service_submission(edit(LLAMA, "spec.predictor.containerConcurrency", 4))
    assert limited.spec.container_concurrency == 4
    assert not any("containerConcurrency" in w for w in limited.warnings)
    assert parse(LLAMA).spec.container_concurrency == 0  # unlimited, as in KServe
    assert "spec.predictor.containerConcurrency" in problems(
        edit(LLAMA, "spec.predictor.containerConcurrency", -1)
    )


def test_the_translations_problems_and_the_services_come_in_one_answer() -> None:
    document = edit(LLAMA, f"{M}.storageUrl", "hf://a/b")  # refused by the translation
    document["spec"]["predictor"]["minReplicas"] = 5  # a rule of kiban's Service: maxReplicas 2
    document["spec"]["predictor"]["scaleTarget"] = -1  # a field of kiban's Service
    with pytest.raises(SpecError) as caught:
        parse_service_submission(document)
    assert [(p.field, p.message) for p in caught.value.problems] == [
        (f"{M}.storageUrl", "unknown field (check its spelling)"),
        (f"{P}.scaleTarget", "Input should be greater than 0"),
        (f"{P}.maxReplicas", "maxReplicas (2) is less than minReplicas (5)"),
    ]
