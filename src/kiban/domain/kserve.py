"""KServe ``serving.kserve.io/v1beta1`` InferenceService manifests, translated into kiban's Service.

Users paste their InferenceService unchanged. ``spec.predictor`` becomes the service: a model of
format ``huggingface`` (or the older ``predictor.huggingface``) runs kiban's model server, a
predictor with ``containers`` runs that container's command (runtime custom). The
``--model_name``, ``--model_id`` and ``--task`` arguments become the spec's fields. Scaling,
canary split and timeout carry over. Fields kiban has no use for (Knative and Istio
annotations, service accounts, tolerations, transformers...) are accepted with one warning each;
a field whose loss would change what is served (another model format, init containers, a second
container) is refused. Errors and warnings name the field as written in the InferenceService.

Resources: GPUs come from ``limits`` (else ``requests``), since Kubernetes requires the two to be
equal for extended resources and limits is where KServe's examples put them; CPU and memory
from ``requests`` (else ``limits``), since requests are what a scheduler reserves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kiban.domain.errors import FieldProblem
from kiban.domain.foreign import ManifestReader

API_VERSION = "serving.kserve.io/v1beta1"
KIND = "InferenceService"
TRANSLATED_ANNOTATION = "kiban.dev/translated-from"
GPU = "nvidia.com/gpu"
KNATIVE_DEFAULT_PORT = 8080  # what KServe's model servers listen on, and Knative's PORT default

QUEUE_LABELS = ("kiban.dev/queue", "kueue.x-k8s.io/queue-name")  # the first present wins
PRIORITY_LABEL = "kiban.dev/priority-class"
# Annotations of the systems kiban stands in for: accepted, reported as ignored.
IGNORED_ANNOTATION_PREFIXES = (
    "serving.kserve.io/",
    "autoscaling.knative.dev/",
    "serving.knative.dev/",
    "networking.knative.dev/",
    "features.knative.dev/",
    "sidecar.istio.io/",
    "proxy.istio.io/",
    "traffic.sidecar.istio.io/",
    "prometheus.kserve.io/",
    "prometheus.io/",
)
METADATA_IGNORED = {"namespace", "generateName", "uid", "resourceVersion", "generation"}
METADATA_IGNORED |= {"creationTimestamp", "managedFields", "selfLink", "ownerReferences"}
METADATA_IGNORED |= {"finalizers"}

PREDICTOR_USED = {"model", "huggingface", "containers", "volumes", "minReplicas", "maxReplicas"}
PREDICTOR_USED |= {"scaleTarget", "scaleMetric", "canaryTrafficPercent", "timeout"}
PREDICTOR_USED |= {"priorityClassName", "containerConcurrency"}
# The pod and component fields of KServe's PredictorSpec that kiban does not use.
PREDICTOR_IGNORED = {
    "activeDeadlineSeconds", "affinity", "annotations", "autoScaling", "batcher",
    "automountServiceAccountToken", "deploymentStrategy", "dnsConfig",
    "dnsPolicy", "enableServiceLinks", "hostAliases", "hostIPC", "hostNetwork", "hostPID",
    "hostUsers", "hostname", "imagePullSecrets", "labels", "logger", "nodeName", "nodeSelector",
    "os", "overhead", "preemptionPolicy", "priority", "readinessGates", "resourceClaims",
    "resources", "restartPolicy", "runtimeClassName", "scaleMetricType", "schedulerName",
    "schedulingGates", "securityContext", "serviceAccount", "serviceAccountName",
    "setHostnameAsFQDN", "shareProcessNamespace", "subdomain", "terminationGracePeriodSeconds",
    "tolerations", "topologySpreadConstraints", "workerSpec",
}  # fmt: skip
PREDICTOR_REFUSED = {"initContainers", "ephemeralContainers"}
FRAMEWORKS = {"sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "pmml"}
FRAMEWORKS |= {"lightgbm", "paddle"}
SUPPORTED_FORMATS = ("huggingface",)

MODEL_USED = {"modelFormat", "args", "storageUri", "env", "resources", "volumeMounts", "image"}
CONTAINER_USED = {"command", "args", "env", "resources", "volumeMounts", "image", "ports"}
CONTAINER_USED |= {"readinessProbe"}
# Container fields (of model and containers[0]) that do not change what kiban serves.
CONTAINER_IGNORED = {
    "name", "runtime", "runtimeVersion", "protocolVersion", "storage", "imagePullPolicy",
    "securityContext", "livenessProbe", "startupProbe", "lifecycle", "terminationMessagePath",
    "terminationMessagePolicy", "workingDir", "tty", "stdin", "stdinOnce", "envFrom",
    "volumeDevices", "resizePolicy", "restartPolicy", "command", "ports", "readinessProbe",
}  # fmt: skip
PULLED_ARGS = {"--model_name": "name", "--model_id": "modelId", "--task": "task"}


@dataclass(frozen=True)
class Translation:
    """An InferenceService as a ``kiban/v1`` Service document, the warnings, and ``paths``: kiban
    field paths mapped to the InferenceService fields they came from (longest prefix wins)."""

    document: dict[str, Any]
    warnings: tuple[str, ...]
    paths: tuple[tuple[str, str], ...]
    problems: tuple[FieldProblem, ...] = ()


def is_inference_service(document: Mapping[str, Any]) -> bool:
    return document.get("apiVersion") == API_VERSION and document.get("kind") == KIND


def translate(document: Mapping[str, Any]) -> Translation:
    """Translate an InferenceService; the result's ``problems`` are the input's
    structural faults, which the caller raises (with the kiban model's own) as a SpecError."""
    return _Translator().run(document)


class _Translator(ManifestReader):
    """One translation: the kiban document built, warnings, problems and the path map."""

    def __init__(self) -> None:
        super().__init__()
        self.warnings: list[str] = []
        self.paths: list[tuple[str, str]] = []

    # -- helpers -----------------------------------------------------------------------------
    def ignore(self, path: str, why: str) -> None:
        self.warnings.append(f"{path}: ignored ({why})")

    def source(self, kiban: str, kserve: str) -> None:
        """Record where a kiban field came from (a later source of the same field replaces)."""
        self.paths = [(k, v) for k, v in self.paths if k != kiban] + [(kiban, kserve)]

    # -- the document ------------------------------------------------------------------------
    def run(self, document: Mapping[str, Any]) -> Translation:
        for key in document:
            if key == "status":
                self.ignore("status", "written by KServe's controller")
            elif key not in ("apiVersion", "kind", "metadata", "spec"):
                self.problem(str(key), "unknown field (check its spelling)")
        metadata = self.mapping(document.get("metadata"), "metadata")
        spec: dict[str, Any] = {}
        meta = self.metadata(metadata, spec)
        self.spec(self.mapping(document.get("spec"), "spec"), spec, str(meta.get("name", "")))
        doc = {"apiVersion": "kiban/v1", "kind": "Service", "metadata": meta, "spec": spec}
        self.source("metadata", "metadata")
        return Translation(doc, tuple(self.warnings), tuple(self.paths), tuple(self.problems))

    def metadata(self, meta: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": meta.get("name")}
        for key in meta:
            if key == "namespace":
                self.ignore(
                    "metadata.namespace", "kiban runs a tenant's services in its own namespace"
                )
            elif key in METADATA_IGNORED:
                self.ignore(f"metadata.{key}", "set by Kubernetes")
            elif key not in ("name", "labels", "annotations"):
                self.problem(f"metadata.{key}", "unknown field (check its spelling)")
        labels = self.mapping(meta.get("labels"), "metadata.labels")
        if labels:
            out["labels"] = labels
        for label in QUEUE_LABELS:
            if label in labels:
                spec["queue"] = labels[label]
                self.source("spec.queue", f"metadata.labels.{label}")
                break
        if PRIORITY_LABEL in labels:
            spec["priorityClass"] = labels[PRIORITY_LABEL]
            self.source("spec.priorityClass", f"metadata.labels.{PRIORITY_LABEL}")
        annotations: dict[str, Any] = {}
        for key, value in self.mapping(meta.get("annotations"), "metadata.annotations").items():
            if str(key).startswith(IGNORED_ANNOTATION_PREFIXES):
                self.ignore(f"metadata.annotations.{key}", "kiban deploys and scales the service")
            else:
                annotations[key] = value
        annotations[TRANSLATED_ANNOTATION] = API_VERSION
        out["annotations"] = annotations
        return out

    def spec(self, spec: dict[str, Any], out: dict[str, Any], name: str) -> None:
        for key in spec:
            if key in ("transformer", "explainer"):
                self.ignore(f"spec.{key}", f"kiban serves the predictor only, without a {key}")
            elif key != "predictor":
                self.problem(f"spec.{key}", "unknown field (check its spelling)")
        if "predictor" not in spec:
            self.problem("spec.predictor", "required field is missing")
            return
        if not isinstance(spec["predictor"], dict):
            self.problem("spec.predictor", "must be a mapping")
            return
        self.source("spec", "spec.predictor")  # scaling fields, also when left at defaults
        self.predictor(spec["predictor"], out, name)

    # -- the predictor -----------------------------------------------------------------------
    def predictor(self, predictor: dict[str, Any], out: dict[str, Any], name: str) -> None:
        where = "spec.predictor"
        for key in predictor:
            path = f"{where}.{key}"
            if key in PREDICTOR_USED:
                continue
            if key in PREDICTOR_IGNORED:
                self.ignore(path, "kiban places and runs the replicas itself")
            elif key in PREDICTOR_REFUSED:
                self.problem(path, "not supported: kiban runs one container per replica")
            elif key in FRAMEWORKS:
                self.problem(path, self.unsupported_format(key))
            else:
                self.problem(path, "unknown field (check its spelling)")
        for kserve, kiban in (
            ("minReplicas", "minReplicas"),
            ("maxReplicas", "maxReplicas"),
            ("scaleTarget", "scaleTarget"),
            ("scaleMetric", "scaleMetric"),
            ("canaryTrafficPercent", "canaryTrafficPercent"),
            ("timeout", "timeout"),
            ("priorityClassName", "priorityClass"),
            ("containerConcurrency", "containerConcurrency"),
        ):
            if predictor.get(kserve) is not None and kiban not in out:
                out[kiban] = predictor[kserve]
                self.source(f"spec.{kiban}", f"{where}.{kserve}")
        model_key = "model" if "model" in predictor else "huggingface"
        has_model = model_key in predictor
        containers = self.items(predictor.get("containers"), f"{where}.containers")
        if has_model and containers:
            self.problem(
                f"{where}.containers", f"give either {where}.{model_key} or containers, not both"
            )
            return
        volumes = self.items(predictor.get("volumes"), f"{where}.volumes")
        if has_model:
            mpath = f"{where}.{model_key}"
            model = self.mapping(predictor[model_key], mpath)
            self.model(model, mpath, out, name, legacy=model_key == "huggingface")
            self.mounts(model, mpath, volumes, out)
        elif containers:
            if len(containers) != 1:
                self.problem(
                    f"{where}.containers",
                    f"kiban runs one container per replica; this predictor has {len(containers)}",
                )
                return
            cpath = f"{where}.containers[0]"
            container = self.mapping(containers[0], cpath)
            self.container(container, cpath, out, name)
            self.mounts(container, cpath, volumes, out)
        else:
            self.problem(
                where, "needs a model (modelFormat huggingface) or containers (a custom server)"
            )

    def unsupported_format(self, name: str) -> str:
        return (
            f"model format {name!r} is not supported; kiban serves "
            f"{', '.join(SUPPORTED_FORMATS)} models, or any HTTP server given in "
            "spec.predictor.containers"
        )

    def model(
        self, model: dict[str, Any], mpath: str, out: dict[str, Any], name: str, legacy: bool
    ) -> None:
        """``predictor.model`` (or the older ``predictor.huggingface``): kiban's model server."""
        out["runtime"] = "huggingface"
        used = MODEL_USED - ({"modelFormat"} if legacy else set())
        self.leftovers(model, mpath, used)
        if not legacy:
            fmt = self.mapping(model.get("modelFormat"), f"{mpath}.modelFormat")
            if "modelFormat" not in model or "name" not in fmt:
                self.problem(f"{mpath}.modelFormat.name", "required field is missing")
            elif not isinstance(fmt["name"], str):
                self.problem(f"{mpath}.modelFormat.name", "must be a string")
            elif fmt["name"].lower() not in SUPPORTED_FORMATS:
                self.problem(f"{mpath}.modelFormat.name", self.unsupported_format(fmt["name"]))
            for key in fmt:
                if key == "version":
                    self.ignore(f"{mpath}.modelFormat.version", "kiban's runtime reads any")
                elif key != "name":
                    self.problem(f"{mpath}.modelFormat.{key}", "unknown field (check its spelling)")
        section: dict[str, Any] = {"name": name}
        self.source("spec.model", mpath)
        self.source("spec.model.name", "metadata.name")
        if model.get("storageUri") is not None:
            section["storageUri"] = model["storageUri"]
        args = self.args(model.get("args"), f"{mpath}.args", section, pull=True)
        section["args"] = args
        out["model"] = section
        if model.get("image") is not None:
            out["image"] = model["image"]
            self.source("spec.image", f"{mpath}.image")
        self.env(model.get("env"), f"{mpath}.env", out)
        self.resources(self.mapping(model.get("resources"), f"{mpath}.resources"), mpath, out)

    def container(
        self, container: dict[str, Any], cpath: str, out: dict[str, Any], name: str
    ) -> None:
        """``predictor.containers[0]``: a custom server, run by its command (runtime custom)."""
        out["runtime"] = "custom"
        self.leftovers(container, cpath, CONTAINER_USED)
        section: dict[str, Any] = {"name": name}
        self.source("spec.model", cpath)
        self.source("spec.model.name", "metadata.name")
        command = container.get("command")
        if not command:
            self.problem(
                f"{cpath}.command",
                "required by kiban: it runs the command itself and does not know the image's "
                "entrypoint; write it here",
            )
        else:
            out["command"] = command
            self.source("spec.command", f"{cpath}.command")
        section["args"] = self.args(container.get("args"), f"{cpath}.args", section, pull=False)
        out["model"] = section
        if container.get("image") is not None:
            out["image"] = container["image"]
            self.source("spec.image", f"{cpath}.image")
        ports = self.items(container.get("ports"), f"{cpath}.ports")
        if ports:
            port = self.mapping(ports[0], f"{cpath}.ports[0]")
            out["port"] = port.get("containerPort")
            self.source("spec.port", f"{cpath}.ports[0].containerPort")
            if len(ports) > 1:
                self.ignore(f"{cpath}.ports[1:]", "kiban routes to the first port")
        else:
            out["port"] = KNATIVE_DEFAULT_PORT
            self.warnings.append(
                f"{cpath}.ports: none given; kiban assumes {KNATIVE_DEFAULT_PORT} "
                "(KServe's default) and sets PORT to it"
            )
        probe = self.mapping(container.get("readinessProbe"), f"{cpath}.readinessProbe")
        http = self.mapping(probe.get("httpGet"), f"{cpath}.readinessProbe.httpGet")
        if http.get("path") is not None:
            out["readinessPath"] = http["path"]
            self.source("spec.readinessPath", f"{cpath}.readinessProbe.httpGet.path")
        else:
            out["readinessPath"] = "/v2/health/ready"
            self.warnings.append(
                f"{cpath}.readinessProbe: no httpGet.path; kiban checks /v2/health/ready "
                "(the Open Inference Protocol's, which KServe's servers answer)"
            )
        self.env(container.get("env"), f"{cpath}.env", out)
        self.resources(self.mapping(container.get("resources"), f"{cpath}.resources"), cpath, out)

    def leftovers(self, container: dict[str, Any], cpath: str, used: set[str]) -> None:
        for key in container:
            if key in used:
                continue
            if key in CONTAINER_IGNORED:
                self.ignore(f"{cpath}.{key}", _CONTAINER_WHY.get(key, "kiban has no counterpart"))
            else:
                self.problem(f"{cpath}.{key}", "unknown field (check its spelling)")

    def args(self, value: Any, where: str, section: dict[str, Any], pull: bool) -> list[Any]:
        """The arguments; ``--model_name``, ``--model_id`` and ``--task`` set the model's fields
        (and, with ``pull``, leave the list: kiban's runtime gets them from those fields). Each
        kept argument's path is recorded, as pulling shifts the indexes."""
        args = self.items(value, where)
        kept: list[Any] = []

        def keep(index: int) -> None:
            self.source(f"spec.model.args[{len(kept)}]", f"{where}[{index}]")
            kept.append(args[index])

        i = 0
        while i < len(args):
            arg = args[i]
            match = re.fullmatch(r"(--[a-z_]+)(?:=(.*))?", arg) if isinstance(arg, str) else None
            field = PULLED_ARGS.get(match.group(1)) if match else None
            if match is None or field is None:
                keep(i)
                i += 1
                continue
            value_text = match.group(2)
            taken = [arg]
            if value_text is None:
                if i + 1 >= len(args) or not isinstance(args[i + 1], str):
                    self.problem(f"{where}[{i}]", f"{arg} needs a value")
                    i += 1
                    continue
                value_text = args[i + 1]
                taken.append(value_text)
            section[field] = value_text
            self.source(f"spec.model.{field}", f"{where}[{i}]")
            if not pull:
                for j in range(i, i + len(taken)):
                    keep(j)
            i += len(taken)
        if value is not None:
            self.source("spec.model.args", where)
        return kept

    def env(self, value: Any, where: str, out: dict[str, Any]) -> None:
        env: dict[str, Any] = {}
        for i, raw in enumerate(self.items(value, where)):
            item = self.mapping(raw, f"{where}[{i}]")
            if not isinstance(item.get("name"), str):
                self.problem(f"{where}[{i}].name", "required field is missing")
            elif "valueFrom" in item:
                self.ignore(
                    f"{where}[{i}].valueFrom ({item['name']})",
                    "kiban does not read secrets or config maps; give a value",
                )
            else:
                env[item["name"]] = item.get("value", "")
                self.source(f"spec.env.{item['name']}", f"{where}[{i}]")
        if env:
            out["env"] = env
        self.source("spec.env", where)

    def resources(self, resources: dict[str, Any], cpath: str, out: dict[str, Any]) -> None:
        """GPUs from limits (else requests); CPU and memory from requests (else limits)."""
        where = f"{cpath}.resources"
        for key in resources:
            if key == "claims":
                self.ignore(f"{where}.claims", "kiban allocates whole GPUs")
            elif key not in ("requests", "limits"):
                self.problem(f"{where}.{key}", "unknown field (check its spelling)")
        requests = self.mapping(resources.get("requests"), f"{where}.requests")
        limits = self.mapping(resources.get("limits"), f"{where}.limits")
        result: dict[str, Any] = {}
        for key, first, second in (
            ("cpu", "requests", "limits"),
            ("memory", "requests", "limits"),
            ("gpu", "limits", "requests"),
        ):
            kserve_key = GPU if key == "gpu" else key
            parts = {"requests": requests, "limits": limits}
            for part in (first, second):
                if parts[part].get(kserve_key) is not None:
                    value = parts[part][kserve_key]
                    if key == "gpu" and isinstance(value, str) and value.isdigit():
                        value = int(value)
                    result[key] = value
                    self.source(f"spec.resources.{key}", f"{where}.{part}.{kserve_key}")
                    break
        for part, values in (("requests", requests), ("limits", limits)):
            for key in values:
                if key not in ("cpu", "memory", GPU):
                    self.ignore(f"{where}.{part}.{key}", "kiban accounts gpu, cpu and memory")
        out["resources"] = result
        self.source("spec.resources", where)

    def mounts(
        self, container: dict[str, Any], cpath: str, volumes: list[Any], out: dict[str, Any]
    ) -> None:
        """The container's mounts of ``predictor.volumes``: claims become kiban volumes."""
        by_name: dict[str, tuple[int, dict[str, Any]]] = {}
        for i, raw in enumerate(volumes):
            volume = self.mapping(raw, f"spec.predictor.volumes[{i}]")
            if isinstance(volume.get("name"), str):
                by_name[volume["name"]] = (i, volume)
            else:
                self.problem(f"spec.predictor.volumes[{i}].name", "required field is missing")
        mounted: set[str] = set()
        result: list[dict[str, Any]] = []
        for j, raw in enumerate(self.items(container.get("volumeMounts"), f"{cpath}.volumeMounts")):
            mpath = f"{cpath}.volumeMounts[{j}]"
            mount = self.mapping(raw, mpath)
            found = by_name.get(str(mount.get("name")))
            if found is None:
                self.problem(
                    f"{mpath}.name",
                    f"no volume named {mount.get('name')!r} in spec.predictor.volumes",
                )
                continue
            i, volume = found
            mounted.add(volume["name"])
            vpath = f"spec.predictor.volumes[{i}]"
            if "persistentVolumeClaim" not in volume:
                kind = next((k for k in volume if k != "name"), "?")
                self.ignore(f"{vpath} ({kind})", "kiban mounts persistentVolumeClaim volumes only")
                continue
            claim = self.mapping(volume["persistentVolumeClaim"], f"{vpath}.persistentVolumeClaim")
            if "subPath" in mount:
                self.ignore(f"{mpath}.subPath", "kiban mounts the whole claim")
            self.source(f"spec.volumes[{len(result)}]", mpath)
            self.source(
                f"spec.volumes[{len(result)}].claimName", f"{vpath}.persistentVolumeClaim.claimName"
            )
            result.append(
                {
                    "name": volume["name"],
                    "claimName": claim.get("claimName"),
                    "mountPath": mount.get("mountPath"),
                    "readOnly": bool(mount.get("readOnly") or claim.get("readOnly")),
                }
            )
        for name, (i, _) in by_name.items():
            if name not in mounted:
                self.ignore(f"spec.predictor.volumes[{i}] ({name})", "no container mounts it")
        if result:
            out["volumes"] = result
        self.source("spec.volumes", "spec.predictor.volumes")


_CONTAINER_WHY = {
    "name": "kiban names the container",
    "runtime": "kiban serves huggingface models with its own runtime",
    "runtimeVersion": "kiban serves huggingface models with its own runtime",
    "protocolVersion": "kiban's runtime speaks both the v1 and the Open Inference (v2) protocols",
    "storage": "write the model's location in storageUri",
    "envFrom": "kiban does not read secrets or config maps; write the variables in env",
    "command": "the huggingface runtime's command is kiban's model server",
    "ports": "the huggingface runtime listens on the port kiban gives it",
    "readinessProbe": "kiban checks the runtime's /v2/health/ready",
}
