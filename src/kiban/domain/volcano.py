"""Volcano ``batch.volcano.sh/v1alpha1`` Job manifests, translated into kiban's Job.

Teams moving from Volcano submit their files unchanged. Each Volcano field becomes the kiban
field that means the same (``minAvailable`` the gang, ``queue``, ``priorityClassName``, the
pytorch plugin's environment, claims as volumes, restart policies); ``schedulerName`` is taken
over, since kiban admits and places the job itself. A field without a counterpart is refused
when ignoring it would change what the job computes (a second container, a secret in the
environment, a plugin kiban lacks), and otherwise ignored with a warning naming it. Errors and
warnings name the field as written in the Volcano file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kiban.domain.errors import FieldProblem, SpecError, format_location
from kiban.domain.extended_resources import is_extended_name
from kiban.domain.foreign import ManifestReader, validation_message
from kiban.domain.jobspec import JobManifest
from kiban.domain.node_affinity import PodAffinity, read_pod_affinity

API_VERSION = "batch.volcano.sh/v1alpha1"
KIND = "Job"
TRANSLATED_ANNOTATION = "kiban.dev/translated-from"
GPU = "nvidia.com/gpu"
# The labels Volcano's job controller puts on every pod of a job (besides its template's).
VOLCANO_JOB_LABEL = "volcano.sh/job-name"
VOLCANO_TASK_LABEL = "volcano.sh/task-spec"
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"

# The pytorch plugin's defaults (Volcano's documented ones).
PYTORCH_MASTER, PYTORCH_WORKER, PYTORCH_PORT = "master", "worker", 23456
INDEX_ENV = ["VK_TASK_INDEX", "VC_TASK_INDEX"]  # what Volcano's env plugin sets

JOB_FIELDS_IGNORED = {"ttlSecondsAfterFinished", "runningEstimate", "minSuccess", "networkTopology"}
TASK_FIELDS_IGNORED = {"minAvailable", "maxRetry", "topologyPolicy", "dependsOn"}
# Pod fields kiban sets itself: taken over without a word.
POD_FIELDS_TAKEN = {"schedulerName", "priorityClassName", "restartPolicy", "dnsPolicy"}
# Pod fields whose loss would change what runs: refused.
POD_FIELDS_REFUSED = {"initContainers", "ephemeralContainers"}
CONTAINER_FIELDS_SILENT = {"name", "ports"}  # a name and declared ports change nothing
CONTAINER_FIELDS_REFUSED = {"envFrom"}

EVENTS = {"*", "PodFailed", "PodEvicted", "PodPending", "PodRunning", "Unknown"}
EVENTS |= {"TaskCompleted", "TaskFailed", "OutOfSync", "CommandIssued", "JobUpdated"}
RESTARTS = {"RestartJob", "RestartTask", "RestartPod"}
ACTIONS = RESTARTS | {"AbortJob", "TerminateJob", "CompleteJob", "ResumeJob", "SyncJob"}
ACTIONS |= {"EnqueueJob", "RestartPartition"}
PLUGINS = {"pytorch", "env", "svc", "mpi", "ssh"}
PLUGINS_REFUSED = {"tensorflow", "ray"}
# The mpi plugin's defaults (Volcano's documented ones): its port is the workers' sshd port.
MPI_MASTER, MPI_WORKER, MPI_PORT = "master", "worker", 22
SSH_KEY_PATH = "/root/.ssh"  # the ssh plugin's default sshKeyFilePath


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


def _pretty(items: list[str]) -> str:
    return ", ".join(items)


class _Translator(ManifestReader):
    """One translation: the problems and warnings found on the way, and the path map."""

    api_version = API_VERSION  # what the translation annotation says it came from

    def __init__(self) -> None:
        super().__init__()
        self.job_name: Any = None
        self.pod_affinities: tuple[PodAffinity, ...] = ()
        self.ignored: list[str] = []
        self.notes: list[str] = []
        self.paths: list[tuple[str, str]] = [
            ("spec.priorityClass", "spec.priorityClassName"),
            ("spec.backoffLimit", "spec.maxRetry"),
        ]

    # -- helpers -------------------------------------------------------------------------
    def leftovers(
        self, value: dict[str, Any], path: str, known: set[str], ignored: set[str]
    ) -> None:
        """Unknown keys are errors (a misspelling); known ones kiban does not use are warnings."""
        for key in value:
            if key in known:
                continue
            if key in ignored:
                self.ignored.append(f"{path}.{key}")
            else:
                self.problem(f"{path}.{key}", "unknown field (check its spelling)")

    # -- the job -------------------------------------------------------------------------
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
            warnings.insert(0, f"ignored (kiban has no counterpart): {_pretty(self.ignored)}")
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

    # -- plugins and policies --------------------------------------------------------------
    def plugins(self, plugins: dict[str, Any], tasks: list[Any], out: dict[str, Any]) -> list[int]:
        """Apply the plugins; the order of the tasks (the pytorch master's first: rank 0)."""
        order = list(range(len(tasks)))
        names = [t.get("name") if isinstance(t, dict) else None for t in tasks]
        ssh_arguments: list[Any] | None = None
        for name, args in plugins.items():
            where = f"spec.plugins.{name}"
            arguments = self.items(args, where)
            if name in PLUGINS_REFUSED:
                self.problem(
                    where,
                    f"the {name} plugin is not supported; kiban supports "
                    f"{_pretty(sorted(PLUGINS))}",
                )
            elif name not in PLUGINS:
                self.problem(where, f"unknown plugin; kiban supports {_pretty(sorted(PLUGINS))}")
            elif name == "env":
                out["indexEnv"] = list(INDEX_ENV)
            elif name == "svc":
                out["hostsFiles"] = True  # /etc/volcano/<task>.host, VC_<TASK>_HOSTS and _NUM
            elif name == "pytorch":
                order = self.pytorch(arguments, where, names, out)
            elif name == "mpi":
                order = self.mpi(arguments, where, names, out)
            elif name == "ssh":
                ssh_arguments = arguments
        if ssh_arguments is not None:  # after mpi, whatever the order they are written in
            self.ssh(ssh_arguments, "spec.plugins.ssh", out)
        if "mpi" in plugins and "pytorch" in plugins:
            self.problem("spec.plugins.mpi", "the mpi and pytorch plugins exclude each other")
        return order

    def plugin_arguments(
        self,
        arguments: list[Any],
        where: str,
        defaults: dict[str, str],
        flags: frozenset[str] = frozenset(),
    ) -> dict[str, str]:
        """``--name=value`` or ``--name value`` arguments (``flags`` take no value), over
        ``defaults``; an unknown argument is a problem naming its position."""
        values = dict(defaults)
        known = ", ".join([f"--{k}=..." for k in defaults] + [f"--{f}" for f in sorted(flags)])
        i = 0
        while i < len(arguments):
            arg = str(arguments[i])
            match = re.fullmatch(r"--?([a-z-]+)(?:=(.*))?", arg)
            if match is None or match.group(1) not in set(defaults) | flags:
                self.problem(f"{where}[{i}]", f"unknown argument {arg!r}; known: {known}")
                i += 1
                continue
            value = match.group(2)
            if match.group(1) in flags:
                value = "true" if value is None else value
            elif value is None and i + 1 < len(arguments):
                i += 1
                value = str(arguments[i])
            values[match.group(1)] = value or ""
            i += 1
        return values

    def mpi(
        self, arguments: list[Any], where: str, names: list[Any], out: dict[str, Any]
    ) -> list[int]:
        """``--master``/``--worker``/``--port``: the master task is the MPI launcher (kiban's
        ``launcher: mpirun``, started once every worker runs, with ``MPI_HOST`` naming the
        workers), the worker task holds the ranks; the port is the workers' sshd port."""
        values = self.plugin_arguments(
            arguments,
            where,
            {"master": MPI_MASTER, "worker": MPI_WORKER, "port": str(MPI_PORT)},
        )
        if values["port"] != str(MPI_PORT):
            if not values["port"].isdigit() or not 0 < int(values["port"]) < 65536:
                self.problem(where, f"--port {values['port']!r} is not a TCP port")
            else:
                self.notes.append(
                    f"{where}: --port={values['port']} is the port the workers' sshd listens "
                    "on; kiban opens no port for it (pods reach each other on any port): "
                    "pass it to mpirun (e.g. -mca plm_rsh_args '-p PORT')"
                )
        for role in ("master", "worker"):
            if values[role] not in names:
                self.problem(
                    where,
                    f"--{role} names task {values[role]!r}, which the job does not have",
                )
        if values["master"] not in names or values["worker"] not in names:
            return list(range(len(names)))
        out["launcher"] = "mpirun"
        out["hostsFiles"] = True  # the mpi plugin turns the svc plugin on (Volcano's docs)
        mpi = out.setdefault("mpi", {})
        mpi.update({"launcherTask": values["master"], "workerTask": values["worker"]})
        self.paths.append(("spec.mpi", where))
        master, worker = names.index(values["master"]), names.index(values["worker"])
        others = [i for i in range(len(names)) if i not in (master, worker)]
        if others:
            self.problem(
                where,
                f"an MPI job has a master and a worker task; this one also has "
                f"{_pretty([str(names[i]) for i in others])}",
            )
        return [master, worker, *others]

    def ssh(self, arguments: list[Any], where: str, out: dict[str, Any]) -> None:
        """``--ssh-key-file-path``: where the generated keys are mounted (kiban makes them for
        every MPI job, in a Secret of the job); only with the mpi plugin, which says who
        connects to whom. Keys given in the file are refused: kiban generates them."""
        values = self.plugin_arguments(
            arguments,
            where,
            {"ssh-key-file-path": SSH_KEY_PATH, "ssh-private-key": "", "ssh-public-key": ""},
            frozenset({"no-root"}),
        )
        for given in ("ssh-private-key", "ssh-public-key"):
            if values[given]:
                self.problem(
                    where, f"--{given}: kiban generates each job's keys (in a Secret of its own)"
                )
        if values.get("no-root"):
            self.notes.append(
                f"{where}: --no-root has no counterpart: the keys are mounted at "
                f"{values['ssh-key-file-path']} whatever user the container runs as"
            )
        if "launcher" not in out:
            self.problem(
                where,
                "the ssh plugin is supported with the mpi plugin, which names the master and "
                "worker tasks: add mpi: [--master=TASK, --worker=TASK]",
            )
            return
        out.setdefault("mpi", {})["sshAuthMountPath"] = values["ssh-key-file-path"]

    def pytorch(
        self, arguments: list[Any], where: str, names: list[Any], out: dict[str, Any]
    ) -> list[int]:
        """``--master``/``--worker``/``--port``: the master's replica 0 is rank 0 and
        MASTER_ADDR, workers follow (rank = index + 1), MASTER_PORT is the port."""
        values = {"master": PYTORCH_MASTER, "worker": PYTORCH_WORKER, "port": str(PYTORCH_PORT)}
        i = 0
        while i < len(arguments):
            arg = str(arguments[i])
            match = re.fullmatch(r"--?(master|worker|port)(?:=(.*))?", arg)
            if match is None:
                self.problem(
                    f"{where}[{i}]",
                    f"unknown argument {arg!r}; known: --master=TASK, --worker=TASK, --port=PORT",
                )
                i += 1
                continue
            value = match.group(2)
            if value is None and i + 1 < len(arguments):
                i += 1
                value = str(arguments[i])
            values[match.group(1)] = value or ""
            i += 1
        if not values["port"].isdigit() or not 0 < int(values["port"]) < 65536:
            self.problem(where, f"--port {values['port']!r} is not a TCP port")
        else:
            out["masterPort"] = int(values["port"])
            self.paths.append(("spec.masterPort", where))
        if values["master"] not in names:
            self.problem(
                where, f"--master names task {values['master']!r}, which the job does not have"
            )
            return list(range(len(names)))
        master = names.index(values["master"])
        worker = names.index(values["worker"]) if values["worker"] in names else None
        first = [master] + ([worker] if worker is not None else [])
        others = [i for i in range(len(names)) if i not in first]
        if others:
            self.notes.append(
                f"{where}: tasks other than {values['master']} and {values['worker']} "
                f"({_pretty([str(names[i]) for i in others])}) get ranks after them and count "
                "in WORLD_SIZE"
            )
        return first + others

    def policies(self, value: Any, where: str) -> bool:
        """Lifecycle policies; True when a failure restarts the job (kiban's OnFailure)."""
        restart = False
        for i, raw in enumerate(self.items(value, where)):
            path = f"{where}[{i}]"
            policy = self.mapping(raw, path)
            self.leftovers(policy, path, {"event", "events", "action", "exitCode"}, {"timeout"})
            events = [policy["event"]] if policy.get("event") else []
            events += self.items(policy.get("events"), f"{path}.events")
            action = policy.get("action")
            if action not in ACTIONS:
                self.problem(
                    f"{path}.action",
                    f"unknown action {action!r}; known: {_pretty(sorted(ACTIONS))}",
                )
                continue
            for event in events:
                if event not in EVENTS:
                    self.problem(
                        f"{path}.event",
                        f"unknown event {event!r}; known: {_pretty(sorted(EVENTS))}",
                    )
            failure = bool({"PodFailed", "*"} & set(events)) or policy.get("exitCode") is not None
            lost = bool({"PodEvicted", "Unknown"} & set(events))
            if action in RESTARTS and failure:
                restart = True
                if action != "RestartJob" or policy.get("exitCode") is not None:
                    self.notes.append(
                        f"{path}: kiban restarts the whole job on any failed replica "
                        "(up to spec.maxRetry times)"
                    )
            elif action in RESTARTS and lost:
                pass  # kiban always requeues a job whose replica was lost with its node
            elif action in {"AbortJob", "TerminateJob"} and failure and not lost:
                pass  # kiban's default: a failed replica fails the job
            elif action == "CompleteJob" and events == ["TaskCompleted"]:
                self.notes.append(
                    f"{path}: a kiban job succeeds when all its replicas have exited 0"
                )
            else:
                self.notes.append(
                    f"{path} ({_pretty([str(e) for e in events])} -> {action}) has no kiban "
                    "counterpart and is ignored"
                )
        return restart

    # -- tasks -------------------------------------------------------------------------------
    def task(
        self, task: dict[str, Any], where: str, kiban: str, job_volumes: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], bool, int | None]:
        """One task (``where`` in the file, ``kiban`` in the translation): the kiban task,
        whether it restarts on failure, its grace period."""
        known = {"name", "replicas", "template", "policies"}
        self.leftovers(task, where, known, TASK_FIELDS_IGNORED)
        out: dict[str, Any] = {}
        if task.get("name") is not None:
            out["name"] = task["name"]
        if task.get("replicas") is not None:
            out["replicas"] = task["replicas"]
        restart = self.policies(task.get("policies"), f"{where}.policies")
        template = self.mapping(task.get("template"), f"{where}.template")
        self.leftovers(template, f"{where}.template", {"metadata", "spec"}, set())
        meta = self.mapping(template.get("metadata"), f"{where}.template.metadata")
        self.leftovers(meta, f"{where}.template.metadata", {"annotations", "labels", "name"}, set())
        if meta.get("annotations"):
            out["annotations"] = meta["annotations"]
            self.paths.append((f"{kiban}.annotations", f"{where}.template.metadata.annotations"))
        pod_path = f"{where}.template.spec"
        pod = self.mapping(template.get("spec"), pod_path)
        restart = restart or pod.get("restartPolicy") in ("OnFailure", "Always")
        grace = pod.get("terminationGracePeriodSeconds")
        for key in ("nodeSelector", "affinity", "hostNetwork"):
            if pod.get(key):
                out[key] = pod[key]
        for key in pod:
            if key in POD_FIELDS_REFUSED:
                self.problem(
                    f"{pod_path}.{key}", "not supported: kiban runs one container per replica"
                )
            elif key not in POD_FIELDS_TAKEN | {
                "containers",
                "volumes",
                "nodeSelector",
                "affinity",
                "hostNetwork",
                "terminationGracePeriodSeconds",
            }:
                self.ignored.append(f"{pod_path}.{key}")
        containers = self.items(pod.get("containers"), f"{pod_path}.containers")
        if len(containers) != 1:
            self.problem(
                f"{pod_path}.containers",
                f"kiban runs exactly one container per "
                f"replica; this template has {len(containers)}",
            )
            return out, restart, grace
        cpath = f"{pod_path}.containers[0]"
        self.container(self.mapping(containers[0], cpath), cpath, out)
        for key in ("command", "args", "env", "image", "resources", "securityContext"):
            self.paths.append((f"{kiban}.{key}", f"{cpath}.{key}"))
        for key in ("volumes", "nodeSelector", "affinity", "hostNetwork"):
            self.paths.append((f"{kiban}.{key}", f"{pod_path}.{key}"))
        volumes = self.pod_volumes(
            self.items(pod.get("volumes"), f"{pod_path}.volumes"),
            self.items(
                containers[0].get("volumeMounts") if isinstance(containers[0], dict) else None,
                f"{cpath}.volumeMounts",
            ),
            pod_path,
        )
        if volumes or job_volumes:
            out["volumes"] = volumes + job_volumes
        return out, restart, grace

    def container(self, container: dict[str, Any], cpath: str, out: dict[str, Any]) -> None:
        for key in container:
            if key in CONTAINER_FIELDS_REFUSED:
                self.problem(f"{cpath}.{key}", "not supported: write the variables in env")
            elif key not in CONTAINER_FIELDS_SILENT | {
                "image",
                "command",
                "args",
                "env",
                "resources",
                "volumeMounts",
                "securityContext",
            }:
                self.ignored.append(f"{cpath}.{key}")
        if not container.get("command"):
            self.problem(
                f"{cpath}.command",
                "required by kiban: it runs the command itself "
                "and does not know the image's entrypoint; write it here",
            )
        else:
            out["command"] = container["command"]
        for key in ("image", "args"):
            if container.get(key) is not None:
                out[key] = container[key]
        env: dict[str, Any] = {}
        for i, raw in enumerate(self.items(container.get("env"), f"{cpath}.env")):
            item = self.mapping(raw, f"{cpath}.env[{i}]")
            if "valueFrom" in item:
                self.problem(f"{cpath}.env[{i}].valueFrom", "not supported: give a value")
            elif not isinstance(item.get("name"), str):
                self.problem(f"{cpath}.env[{i}].name", "required field is missing")
            else:
                env[item["name"]] = item.get("value", "")
        if env:
            out["env"] = env
        out["resources"] = self.resources(
            self.mapping(container.get("resources"), f"{cpath}.resources"), f"{cpath}.resources"
        )
        if container.get("securityContext") is not None:  # capabilities (IPC_LOCK for RDMA)
            out["securityContext"] = container["securityContext"]

    def resources(self, resources: dict[str, Any], where: str) -> dict[str, Any]:
        """Requests (else limits) of cpu and memory; nvidia.com/gpu and extended resources
        (``nvidia.com/hostdev``, ``rdma/hca``, ``hugepages-2Mi``) from limits (or requests),
        which must agree where both are given."""
        self.leftovers(resources, where, {"requests", "limits"}, {"claims"})
        requests = self.mapping(resources.get("requests"), f"{where}.requests")
        limits = self.mapping(resources.get("limits"), f"{where}.limits")
        out: dict[str, Any] = {}
        for key in ("cpu", "memory"):
            value = requests.get(key, limits.get(key))
            if value is not None:
                out[key] = value
        gpu_limit, gpu_request = limits.get(GPU), requests.get(GPU)
        if gpu_limit is not None and gpu_request is not None and str(gpu_limit) != str(gpu_request):
            self.problem(f"{where}.requests.{GPU}", f"must equal limits.{GPU} ({gpu_limit})")
        gpu = gpu_limit if gpu_limit is not None else gpu_request
        if gpu is not None:
            out["gpu"] = int(gpu) if isinstance(gpu, str) and gpu.isdigit() else gpu
        for key in sorted({*requests, *limits} - {"cpu", "memory", GPU}):
            if not is_extended_name(str(key)):
                for part, values in (("requests", requests), ("limits", limits)):
                    if key in values:
                        self.ignored.append(f"{where}.{part}.{key}")
                continue
            limit, request = limits.get(key), requests.get(key)
            if limit is not None and request is not None and str(limit) != str(request):
                self.problem(f"{where}.requests.{key}", f"must equal limits.{key} ({limit})")
            out[key] = limit if limit is not None else request
        return out

    def pod_volumes(
        self, volumes: list[Any], mounts: list[Any], pod_path: str
    ) -> list[dict[str, Any]]:
        """The claims and emptyDir volumes (``/dev/shm`` in memory) the container mounts; other
        volume kinds refused."""
        by_name = {}
        for i, raw in enumerate(volumes):
            if isinstance(raw, dict) and isinstance(raw.get("name"), str):
                by_name[raw["name"]] = (i, raw)
        out = []
        for j, raw in enumerate(mounts):
            mount = self.mapping(raw, f"{pod_path}.containers[0].volumeMounts[{j}]")
            found = by_name.get(mount.get("name", ""))
            if found is None:
                self.problem(
                    f"{pod_path}.containers[0].volumeMounts[{j}].name",
                    f"no volume named {mount.get('name')!r} in {pod_path}.volumes",
                )
                continue
            i, volume = found
            if "subPath" in mount:
                self.ignored.append(f"{pod_path}.containers[0].volumeMounts[{j}].subPath")
            if "persistentVolumeClaim" in volume:
                claim = self.mapping(volume["persistentVolumeClaim"], f"{pod_path}.volumes[{i}]")
                out.append(
                    {
                        "name": volume["name"],
                        "claimName": claim.get("claimName"),
                        "mountPath": mount.get("mountPath"),
                        "readOnly": bool(mount.get("readOnly") or claim.get("readOnly")),
                    }
                )
            elif "emptyDir" in volume:
                empty = self.mapping(volume["emptyDir"] or {}, f"{pod_path}.volumes[{i}].emptyDir")
                out.append(
                    {
                        "name": volume["name"],
                        "emptyDir": empty,
                        "mountPath": mount.get("mountPath"),
                        "readOnly": bool(mount.get("readOnly")),
                    }
                )
            else:
                kind = next((k for k in volume if k != "name"), "?")
                self.problem(
                    f"{pod_path}.volumes[{i}].{kind}",
                    "not supported: kiban mounts persistentVolumeClaim and emptyDir volumes",
                )
        return out
