"""Volcano's tasks: pod templates (one container, its command, env, resources and volumes)
and lifecycle policies, read into kiban's task fields.

The MPIJob translation reads its replica specs' pod templates with the same reader.
"""

from __future__ import annotations

from typing import Any

from kiban.domain.extended_resources import is_extended_name
from kiban.domain.volcano_reader import TranslationReader, pretty

GPU = "nvidia.com/gpu"
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


class TaskReader(TranslationReader):
    """Reads tasks and policies; the job-level reader (``volcano._Translator``) builds on it."""

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
                    f"unknown action {action!r}; known: {pretty(sorted(ACTIONS))}",
                )
                continue
            for event in events:
                if event not in EVENTS:
                    self.problem(
                        f"{path}.event",
                        f"unknown event {event!r}; known: {pretty(sorted(EVENTS))}",
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
                    f"{path} ({pretty([str(e) for e in events])} -> {action}) has no kiban "
                    "counterpart and is ignored"
                )
        return restart

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
