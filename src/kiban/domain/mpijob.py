"""Kubeflow MPI Operator ``kubeflow.org/v2beta1`` MPIJob manifests, translated into kiban's Job.

Teams moving from the MPI Operator submit their files unchanged. ``mpiReplicaSpecs.Launcher``
and ``Worker`` become the tasks ``launcher`` and ``worker`` of a ``launcher: mpirun`` job (the
launcher first: rank 0); ``slotsPerWorker`` (the Operator's default, 1, written out),
``mpiImplementation``, ``sshAuthMountPath`` and ``runLauncherAsWorker`` become ``spec.mpi``;
``runPolicy`` maps to what kiban has (``backoffLimit``, ``activeDeadlineSeconds`` as
``maxRuntime``, the scheduling policy's queue, priority class and gang) and the rest is
ignored with a warning naming it. The pod templates are read as Volcano's are (one container,
its command, env, resources and claims: ``volcano_tasks.TaskReader.task``), so errors and warnings
name the field as written in the MPIJob file.

On Kubernetes kiban then makes what the Operator makes (see
``executors/kubernetes/mpi_objects``): the hostfile ConfigMap, the ssh keys' Secret, the
workers' DNS names, and the launcher only once every worker runs (the Operator's
``launcherCreationPolicy: WaitForWorkersReady``, which kiban always follows).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kiban.domain.mpi import MpiImplementation
from kiban.domain.volcano import Translation, _template, _Translator
from kiban.domain.volcano_reader import pretty as _pretty

API_VERSION = "kubeflow.org/v2beta1"
KIND = "MPIJob"
LAUNCHER, WORKER = "Launcher", "Worker"
TASK_NAMES = {LAUNCHER: "launcher", WORKER: "worker"}
DEFAULT_SLOTS = 1  # the Operator's default slotsPerWorker
CREATION_POLICIES = ("AtStartup", "WaitForWorkersReady")
CLEAN_POD_POLICIES = ("All", "None", "Running")
RESTART_POLICIES = ("Always", "ExitCode", "Never", "OnFailure")
RESTARTS = {"Always", "ExitCode", "OnFailure"}  # a failed launcher runs again
SPEC_FIELDS = {"slotsPerWorker", "runLauncherAsWorker", "runPolicy", "mpiImplementation"}
SPEC_FIELDS |= {"launcherCreationPolicy", "sshAuthMountPath", "mpiReplicaSpecs"}
RUN_POLICY_IGNORED = {"ttlSecondsAfterFinished", "managedBy"}
# The labels the Operator gives its pods (besides their template's): what a pod (anti-)affinity
# of a template selects them by.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
SCHEDULING_IGNORED = {"minResources", "scheduleTimeoutSeconds"}


def is_mpijob(document: Mapping[str, Any]) -> bool:
    return document.get("apiVersion") == API_VERSION and document.get("kind") == KIND


def translate(document: Mapping[str, Any]) -> Translation:
    """Translate an MPIJob; SpecError lists every problem, each naming its MPIJob field."""
    return _MpiJobTranslator().run(document)


class _MpiJobTranslator(_Translator):
    """One MPIJob translation: the Volcano reader's pod templates and metadata, this spec."""

    api_version = API_VERSION

    def __init__(self) -> None:
        super().__init__()
        self.paths = [
            ("spec.mpi.slotsPerWorker", "spec.slotsPerWorker"),
            ("spec.mpi.implementation", "spec.mpiImplementation"),
            ("spec.mpi.sshAuthMountPath", "spec.sshAuthMountPath"),
            ("spec.mpi.runLauncherAsWorker", "spec.runLauncherAsWorker"),
            ("spec.mpi", "spec"),
            ("spec.backoffLimit", "spec.runPolicy.backoffLimit"),
            ("spec.maxRuntime", "spec.runPolicy.activeDeadlineSeconds"),
            ("spec.queue", "spec.runPolicy.schedulingPolicy.queue"),
            ("spec.priorityClass", "spec.runPolicy.schedulingPolicy.priorityClass"),
            ("spec.minAvailable", "spec.runPolicy.schedulingPolicy.minAvailable"),
            ("spec.tasks", "spec.mpiReplicaSpecs"),
        ]

    def spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.leftovers(spec, "spec", SPEC_FIELDS, set())
        out: dict[str, Any] = {"launcher": "mpirun"}
        mpi: dict[str, Any] = {"slotsPerWorker": spec.get("slotsPerWorker", DEFAULT_SLOTS)}
        implementation = spec.get("mpiImplementation")
        if implementation is not None:
            known = [str(i) for i in MpiImplementation]
            if implementation not in known:
                self.problem(
                    "spec.mpiImplementation",
                    f"unknown MPI implementation {implementation!r}; known: {_pretty(known)}",
                )
            mpi["implementation"] = implementation
        if spec.get("sshAuthMountPath") is not None:
            mpi["sshAuthMountPath"] = spec["sshAuthMountPath"]
        as_worker = spec.get("runLauncherAsWorker")
        if as_worker is not None:
            mpi["runLauncherAsWorker"] = as_worker
        self.creation_policy(spec.get("launcherCreationPolicy"))
        out["mpi"] = mpi
        self.run_policy(self.mapping(spec.get("runPolicy"), "spec.runPolicy"), out)
        out["tasks"] = self.replica_specs(
            self.mapping(spec.get("mpiReplicaSpecs"), "spec.mpiReplicaSpecs"),
            as_worker is True,
            out,
        )
        return out

    def creation_policy(self, policy: Any) -> None:
        if policy is None or policy == "WaitForWorkersReady":
            return
        if policy not in CREATION_POLICIES:
            self.problem(
                "spec.launcherCreationPolicy",
                f"unknown policy {policy!r}; known: {_pretty(list(CREATION_POLICIES))}",
            )
        else:
            self.notes.append(
                "spec.launcherCreationPolicy: AtStartup: kiban creates the launcher once every "
                "worker runs (as WaitForWorkersReady does)"
            )

    def run_policy(self, policy: dict[str, Any], out: dict[str, Any]) -> None:
        """``runPolicy``: what kiban has is mapped, what it has not is a warning."""
        known = {"cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds", "schedulingPolicy"}
        self.leftovers(policy, "spec.runPolicy", known | {"suspend"}, RUN_POLICY_IGNORED)
        clean = policy.get("cleanPodPolicy")
        if clean is not None and clean not in CLEAN_POD_POLICIES:
            self.problem(
                "spec.runPolicy.cleanPodPolicy",
                f"unknown policy {clean!r}; known: {_pretty(list(CLEAN_POD_POLICIES))}",
            )
        elif clean == "None":
            self.notes.append(
                "spec.runPolicy.cleanPodPolicy: None: kiban deletes a job's pods when it ends "
                "(their logs are kept: kiban logs)"
            )
        if policy.get("suspend") is True:
            self.problem(
                "spec.runPolicy.suspend",
                "kiban has no suspended jobs: submit the job when it should run",
            )
        if policy.get("backoffLimit") is not None:
            out["backoffLimit"] = policy["backoffLimit"]
        if policy.get("activeDeadlineSeconds") is not None:
            out["maxRuntime"] = policy["activeDeadlineSeconds"]
        where = "spec.runPolicy.schedulingPolicy"
        scheduling = self.mapping(policy.get("schedulingPolicy"), where)
        self.leftovers(
            scheduling, where, {"minAvailable", "queue", "priorityClass"}, SCHEDULING_IGNORED
        )
        for mpijob, kiban in (
            ("minAvailable", "minAvailable"),
            ("queue", "queue"),
            ("priorityClass", "priorityClass"),
        ):
            if scheduling.get(mpijob) is not None:
                out[kiban] = scheduling[mpijob]

    def replica_specs(
        self, specs: dict[str, Any], launcher_as_worker: bool, out: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """``mpiReplicaSpecs``: the launcher (one replica) first, then the workers."""
        where = "spec.mpiReplicaSpecs"
        self.leftovers(specs, where, {LAUNCHER, WORKER}, set())
        if LAUNCHER not in specs:
            self.problem(f"{where}.{LAUNCHER}", "required: an MPIJob has a launcher")
            return []
        worker = specs.get(WORKER)
        worker_replicas = (
            self.mapping(worker, f"{where}.{WORKER}").get("replicas", 1) if worker else 0
        )
        if not worker_replicas and not launcher_as_worker:
            self.problem(
                f"{where}.{WORKER}" + (".replicas" if worker else ""),
                "a launcher without workers: an MPIJob needs at least one worker "
                "(or runLauncherAsWorker: true)",
            )
            return []
        tasks: list[dict[str, Any]] = []
        kinds = (LAUNCHER, WORKER) if worker_replicas else (LAUNCHER,)
        for kind in kinds:
            index = len(tasks)
            self.paths.append((f"spec.tasks[{index}]", f"{where}.{kind}"))
            tasks.append(self.replica_spec(kind, specs[kind], f"{where}.{kind}", index, out))
        self.spread_replicas([specs[kind] for kind in kinds], kinds, tasks, where)
        return tasks

    def spread_replicas(
        self, raw: list[Any], kinds: tuple[str, ...], tasks: list[dict[str, Any]], where: str
    ) -> None:
        """What each replica type's pod (anti-)affinity means, its pods labelled as the
        Operator labels them (the template's labels, the job's name, the role): a task kept one
        replica per node gets ``maxReplicasPerNode: 1``."""
        templates = [_template(spec) for spec in raw]
        labels = [
            {
                **template_labels,
                JOB_NAME_LABEL: str(self.job_name),
                JOB_ROLE_LABEL: TASK_NAMES[kind],
            }
            for kind, (template_labels, _) in zip(kinds, templates, strict=True)
        ]
        sources = [
            (template[1], f"{where}.{kind}.template.spec.affinity", index)
            for index, (kind, template) in enumerate(zip(kinds, templates, strict=True))
        ]
        self.pod_affinities = self.read_spreads(sources, labels, tasks)

    def replica_spec(
        self, kind: str, raw: Any, where: str, index: int, out: dict[str, Any]
    ) -> dict[str, Any]:
        spec = self.mapping(raw, where)
        self.leftovers(spec, where, {"replicas", "template", "restartPolicy"}, set())
        restart = spec.get("restartPolicy")
        if restart is not None and restart not in RESTART_POLICIES:
            self.problem(
                f"{where}.restartPolicy",
                f"unknown policy {restart!r}; known: {_pretty(list(RESTART_POLICIES))}",
            )
        template = self.args_as_command(spec, where, index)
        task: dict[str, Any] = {"name": TASK_NAMES[kind], "template": template}
        if spec.get("replicas") is not None:
            task["replicas"] = spec["replicas"]
        kiban_task, pod_restart, grace = self.task(task, where, f"spec.tasks[{index}]", [])
        if kind == LAUNCHER and (restart in RESTARTS or pod_restart):
            out["restartPolicy"] = "OnFailure"
        if grace is not None:
            out["terminationGracePeriod"] = max(grace, out.get("terminationGracePeriod", 0))
        return kiban_task

    def args_as_command(self, spec: dict[str, Any], where: str, index: int) -> Any:
        """The template, with a container that has ``args`` but no ``command`` given the args
        as its command (the Operator's examples run ``args: [mpirun, ...]`` on images without
        an entrypoint; kiban runs the command itself and does not know the image's)."""
        template = spec.get("template")
        if not isinstance(template, dict):
            return template
        pod = template.get("spec")
        containers = pod.get("containers") if isinstance(pod, dict) else None
        if not isinstance(containers, list) or len(containers) != 1:
            return template
        container = containers[0]
        if not isinstance(container, dict) or container.get("command"):
            return template
        if not container.get("args"):
            return template
        written: dict[str, Any] = copy.deepcopy(template)
        only = written["spec"]["containers"][0]
        only["command"] = only.pop("args")
        self.paths.append(
            (
                f"spec.tasks[{index}].command",
                f"{where}.template.spec.containers[0].args",
            )
        )
        self.notes.append(
            f"{where}.template.spec.containers[0]: no command: kiban runs its args as the "
            "command (it does not know the image's entrypoint)"
        )
        return written
