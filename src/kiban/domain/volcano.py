"""Volcano ``batch.volcano.sh/v1alpha1`` Job manifests, translated into kiban's Job.

Teams moving from Volcano submit their files unchanged. Each Volcano field becomes the kiban
field that means the same (``minAvailable`` the gang, ``queue``, ``priorityClassName``, the
pytorch plugin's environment, claims as volumes, restart policies); ``schedulerName`` is taken
over, since kiban admits and places the job itself. A field without a counterpart is refused
when ignoring it would change what the job computes (a second container, a secret in the
environment, a plugin kiban lacks), and otherwise ignored with a warning naming it. Errors and
warnings name the field as written in the Volcano file.

This module reads the job (metadata, spec, volumes, pod spreads); its tasks and policies are read
in ``volcano_tasks``, its plugins in ``volcano_plugins``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kiban.domain.errors import FieldProblem, SpecError, format_location
from kiban.domain.foreign import validation_message
from kiban.domain.jobspec import JobManifest
from kiban.domain.node_affinity import PodAffinity, read_pod_affinity
from kiban.domain.volcano_plugins import PluginReader
from kiban.domain.volcano_reader import pretty
from kiban.domain.volcano_tasks import TaskReader

API_VERSION = "batch.volcano.sh/v1alpha1"
KIND = "Job"
TRANSLATED_ANNOTATION = "kiban.dev/translated-from"
# The labels Volcano's job controller puts on every pod of a job (besides its template's).
VOLCANO_JOB_LABEL = "volcano.sh/job-name"
VOLCANO_TASK_LABEL = "volcano.sh/task-spec"
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"

JOB_FIELDS_IGNORED = {"ttlSecondsAfterFinished", "runningEstimate", "minSuccess", "networkTopology"}


@dataclass(frozen=True)
class Translation:
    """A Volcano Job as kiban's: the ``kiban/v1`` document stored and run, and the warnings.

    ``paths`` maps kiban field paths to the Volcano fields they came from (longest prefix wins),
    so that a later check (cluster fit, priority class) names the field the user wrote.
    ``pod_affinities`` says, per task of the translation, what its pod (anti-)affinity means,
    read against the labels Volcano gives its pods (``volcano.sh/job-name``,
    ``volcano.sh/task-spec``, ``volcano.sh/queue-name`` and the template's own).
    """

    document: dict[str, Any]
    manifest: JobManifest
    warnings: tuple[str, ...]
    paths: tuple[tuple[str, str], ...]
    pod_affinities: tuple[PodAffinity, ...] = ()  # what each task's pod affinity means

    def source_path(self, path: str) -> str:
        """The Volcano field a kiban field path came from (the path itself when unknown)."""
        return source_path(self.paths, path)


def is_volcano_job(document: Mapping[str, Any]) -> bool:
    return document.get("apiVersion") == API_VERSION and document.get("kind") == KIND


def source_path(paths: tuple[tuple[str, str], ...], path: str) -> str:
    best = ("", "")
    for kiban, volcano in paths:
        if (path == kiban or path.startswith((kiban + ".", kiban + "["))) and len(kiban) > len(
            best[0]
        ):
            best = (kiban, volcano)
    return best[1] + path[len(best[0]) :] if best[0] else path


def translate(document: Mapping[str, Any]) -> Translation:
    """Translate a Volcano Job; SpecError lists every problem, each naming its Volcano field."""
    return _Translator().run(document)


def _template(task: Any) -> tuple[dict[str, str], Any]:
    """A task's pod template labels and affinity, as written (empty when malformed: the
    translation reports malformed parts on its own)."""
    template = task.get("template") if isinstance(task, dict) else None
    if not isinstance(template, dict):
        return {}, None
    meta, pod = template.get("metadata"), template.get("spec")
    written = meta.get("labels") if isinstance(meta, dict) else None
    labels = {str(k): str(v) for k, v in written.items()} if isinstance(written, dict) else {}
    return labels, pod.get("affinity") if isinstance(pod, dict) else None


class _Translator(TaskReader, PluginReader):
    """One translation: the job's metadata, spec and volumes (tasks and plugins: the bases)."""

    api_version = API_VERSION  # what the translation annotation says it came from

    def __init__(self) -> None:
        super().__init__()
        self.job_name: Any = None
        self.pod_affinities: tuple[PodAffinity, ...] = ()
        self.paths = [
            ("spec.priorityClass", "spec.priorityClassName"),
            ("spec.backoffLimit", "spec.maxRetry"),
        ]

    def run(self, document: Mapping[str, Any]) -> Translation:
        doc = dict(document)
        self.leftovers(doc, "", {"apiVersion", "kind", "metadata", "spec"}, {"status"})
        self.ignored = [p.lstrip(".") for p in self.ignored]
        self.problems = [FieldProblem(p.field.lstrip("."), p.message) for p in self.problems]
        metadata = self.metadata(self.mapping(doc.get("metadata"), "metadata"))
        spec = self.mapping(doc.get("spec"), "spec")
        kiban_spec = self.spec(spec)
        if self.problems:
            raise SpecError(self.problems)
        kiban_doc = {"apiVersion": "kiban/v1", "kind": "Job", "metadata": metadata}
        kiban_doc["spec"] = kiban_spec
        paths = tuple(self.paths)
        try:
            manifest = JobManifest.model_validate(kiban_doc)
        except ValidationError as exc:
            raise SpecError(
                [
                    FieldProblem(
                        source_path(paths, format_location(tuple(e["loc"]))),
                        validation_message(e),
                    )
                    for e in exc.errors()
                ]
            ) from None
        warnings = list(self.notes)
        if self.ignored:
            warnings.insert(0, f"ignored (kiban has no counterpart): {pretty(self.ignored)}")
        return Translation(kiban_doc, manifest, tuple(warnings), paths, self.pod_affinities)

    def metadata(self, meta: dict[str, Any]) -> dict[str, Any]:
        known = {"name", "labels", "annotations"}
        ignored = {"namespace", "generateName", "uid", "resourceVersion", "generation"}
        ignored |= {"creationTimestamp", "managedFields", "selfLink", "ownerReferences"}
        ignored |= {"finalizers"}
        self.leftovers(meta, "metadata", known, ignored)
        if "namespace" in meta:
            self.ignored.remove("metadata.namespace")
            self.notes.append(
                "metadata.namespace is not used: kiban runs a tenant's jobs in its own namespace"
            )
        out: dict[str, Any] = {"name": meta.get("name")}
        self.job_name = meta.get("name")
        annotations = dict(self.mapping(meta.get("annotations"), "metadata.annotations"))
        annotations[TRANSLATED_ANNOTATION] = self.api_version
        out["annotations"] = annotations
        if meta.get("labels") is not None:
            out["labels"] = meta["labels"]
        return out

    def spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        known = {"schedulerName", "minAvailable", "queue", "priorityClassName", "maxRetry"}
        known |= {"tasks", "plugins", "policies", "volumes"}
        self.leftovers(spec, "spec", known, JOB_FIELDS_IGNORED)
        out: dict[str, Any] = {}
        for volcano, kiban in (
            ("minAvailable", "minAvailable"),
            ("queue", "queue"),
            ("priorityClassName", "priorityClass"),
            ("maxRetry", "backoffLimit"),
        ):
            if spec.get(volcano) is not None:
                out[kiban] = spec[volcano]
        tasks = self.items(spec.get("tasks"), "spec.tasks")
        if not tasks and "tasks" not in spec:
            self.problem("spec.tasks", "required field is missing")
        job_volumes = self.job_volumes(self.items(spec.get("volumes"), "spec.volumes"))
        order = self.plugins(self.mapping(spec.get("plugins"), "spec.plugins"), tasks, out)
        restart = self.policies(spec.get("policies"), "spec.policies")
        grace: list[int] = []
        kiban_tasks = []
        for new_index, old_index in enumerate(order):
            where = f"spec.tasks[{old_index}]"
            self.paths.append((f"spec.tasks[{new_index}]", where))
            task, task_restart, task_grace = self.task(
                self.mapping(tasks[old_index], where),
                where,
                f"spec.tasks[{new_index}]",
                job_volumes,
            )
            kiban_tasks.append(task)
            restart = restart or task_restart
            grace += [task_grace] if task_grace is not None else []
        out["tasks"] = kiban_tasks
        self.pod_affinities = self.spread(tasks, order, kiban_tasks, str(spec.get("queue") or ""))
        if restart:
            out["restartPolicy"] = "OnFailure"
        if grace:
            out["terminationGracePeriod"] = max(grace)
        return out

    def spread(
        self, tasks: list[Any], order: list[int], kiban_tasks: list[dict[str, Any]], queue: str
    ) -> tuple[PodAffinity, ...]:
        """What each task's pod (anti-)affinity means, its pods labelled as Volcano labels them
        (its template's labels, the job's and the task's names, the queue): a task kept one
        replica per node gets ``maxReplicasPerNode: 1``. In the translation's task order."""
        templates = [_template(raw) for raw in tasks]
        labels = []
        for raw, (template_labels, _affinity) in zip(tasks, templates, strict=True):
            name = raw.get("name", "") if isinstance(raw, dict) else ""
            labels.append(
                {
                    **template_labels,
                    VOLCANO_JOB_LABEL: str(self.job_name),
                    VOLCANO_TASK_LABEL: str(name),
                    VOLCANO_QUEUE_LABEL: queue or "default",
                }
            )
        sources = [
            (templates[old][1], f"spec.tasks[{old}].template.spec.affinity", old) for old in order
        ]
        return self.read_spreads(sources, labels, kiban_tasks)

    def read_spreads(
        self,
        sources: list[tuple[Any, str, int]],
        labels: list[dict[str, str]],
        kiban_tasks: list[dict[str, Any]],
    ) -> tuple[PodAffinity, ...]:
        """Each translated task's pod (anti-)affinity read against its pods' ``labels`` (in the
        file's order; ``sources``: the affinity, where it is written, its pods' place in
        ``labels``, in the translation's order); one kept one replica per node gets
        ``maxReplicasPerNode: 1``."""
        readings = []
        for new_index, (affinity, where, old_index) in enumerate(sources):
            others = labels[:old_index] + labels[old_index + 1 :]
            reading = read_pod_affinity(affinity, labels[old_index], others)
            if reading.one_per_node:
                kiban_tasks[new_index]["maxReplicasPerNode"] = 1
                self.paths.append(
                    (f"spec.tasks[{new_index}].maxReplicasPerNode", f"{where}.podAntiAffinity")
                )
            readings.append(reading)
        return tuple(readings)

    def job_volumes(self, volumes: list[Any]) -> list[dict[str, Any]]:
        """``spec.volumes``: claims mounted into every task's container."""
        out = []
        for i, raw in enumerate(volumes):
            where = f"spec.volumes[{i}]"
            volume = self.mapping(raw, where)
            self.leftovers(volume, where, {"mountPath", "volumeClaimName", "volumeClaim"}, set())
            claim = volume.get("volumeClaimName")
            if not claim:
                self.problem(
                    f"{where}.volumeClaimName",
                    "required: kiban mounts existing claims and does not create them "
                    "(create the PersistentVolumeClaim, then name it here)",
                )
                continue
            out.append(
                {"name": f"volume-{i}", "claimName": claim, "mountPath": volume.get("mountPath")}
            )
        return out
