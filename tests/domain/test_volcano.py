"""Volcano Job manifests: what each field becomes in kiban's Job, and what is refused, where."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kiban.domain.errors import SpecError
from kiban.domain.manifests import load_document, parse_job_manifest, parse_submission
from kiban.domain.volcano import TRANSLATED_ANNOTATION, translate

GI = 2**30

# Shaped like the example in Volcano's pytorch plugin guide: a master and workers, the plugin
# with its three arguments, OnFailure pods, and the master's TaskCompleted policy.
PYTORCH = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: pytorch-job
spec:
  minAvailable: 1
  schedulerName: volcano
  plugins:
    pytorch: ["--master=master", "--worker=worker", "--port=23456"]
  tasks:
    - replicas: 1
      name: master
      policies:
        - event: TaskCompleted
          action: CompleteJob
      template:
        spec:
          containers:
            - image: registry.example/pytorch-dist:1.0
              imagePullPolicy: IfNotPresent
              name: master
              command: ["python", "/opt/train.py"]
              args: ["--epochs", "3"]
          restartPolicy: OnFailure
    - replicas: 2
      name: worker
      template:
        spec:
          containers:
            - image: registry.example/pytorch-dist:1.0
              imagePullPolicy: IfNotPresent
              name: worker
              command: ["python", "/opt/train.py"]
              args: ["--epochs", "3"]
              workingDir: /opt
          restartPolicy: OnFailure
"""

# A GPU job of one task as platform teams write them: a queue, a priority class, a gang, the
# env and svc plugins, a shared claim from spec.volumes, a claim and /dev/shm in the template.
GPU_JOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: llm-finetune
  namespace: team-vision
  labels: {team: vision}
spec:
  schedulerName: volcano
  queue: vision
  priorityClassName: high
  minAvailable: 4
  maxRetry: 5
  plugins:
    env: []
    svc: ["--publish-not-ready-addresses=true"]
  policies:
    - event: PodEvicted
      action: RestartJob
    - event: PodFailed
      action: RestartJob
  volumes:
    - mountPath: /data
      volumeClaimName: shared-datasets
  tasks:
    - name: trainer
      replicas: 4
      template:
        metadata:
          annotations: {kiban.dev/sim-duration: 2s}
        spec:
          nodeSelector: {nvidia.com/gpu.product: H100-SXM}
          tolerations: [{key: dedicated, operator: Exists}]
          terminationGracePeriodSeconds: 120
          containers:
            - name: trainer
              image: registry.example/llm:2
              command: ["torchrun", "--nproc_per_node=8", "finetune.py"]
              env:
                - {name: NCCL_DEBUG, value: INFO}
                - {name: EPOCHS, value: "3"}
              resources:
                requests: {cpu: "32", memory: 256Gi, nvidia.com/gpu: 8}
                limits: {memory: 256Gi, nvidia.com/gpu: 8, rdma/hca: 1}
              volumeMounts:
                - {name: checkpoints, mountPath: /ckpt}
                - {name: shm, mountPath: /dev/shm}
          volumes:
            - name: checkpoints
              persistentVolumeClaim: {claimName: llm-checkpoints}
            - name: shm
              emptyDir: {medium: Memory}
"""


def doc(text: str) -> dict[str, Any]:
    return load_document(text)


def test_pytorch_plugin_example_becomes_a_two_task_gang_with_the_port() -> None:
    result = translate(doc(PYTORCH))
    spec = result.manifest.spec
    assert [(t.name, t.replicas) for t in spec.tasks] == [("master", 1), ("worker", 2)]
    assert spec.master_port == 23456
    assert spec.min_available == 1
    assert spec.restart_policy == "OnFailure"  # the pods' restartPolicy
    assert spec.backoff_limit == 3  # Volcano's maxRetry default
    master = spec.tasks[0]
    assert master.command == ["python", "/opt/train.py"]
    assert master.args == ["--epochs", "3"]
    assert master.image == "registry.example/pytorch-dist:1.0"
    assert master.resources.gpu == 0
    assert result.manifest.metadata.annotations[TRANSLATED_ANNOTATION] == (
        "batch.volcano.sh/v1alpha1"
    )
    ignored = result.warnings[0]
    assert "spec.tasks[0].template.spec.containers[0].imagePullPolicy" in ignored
    assert "spec.tasks[1].template.spec.containers[0].workingDir" in ignored
    assert any("spec.tasks[0].policies[0]" in w and "exited 0" in w for w in result.warnings)


def test_the_master_task_comes_first_whatever_the_file_order() -> None:
    """Rank 0 is the master's replica; workers follow (Volcano: worker rank = index + 1)."""
    data = doc(PYTORCH)
    data["spec"]["tasks"].reverse()
    data["spec"]["plugins"]["pytorch"] = ["--port", "29400"]  # defaults, and a spaced value
    spec = translate(data).manifest.spec
    assert [t.name for t in spec.tasks] == ["master", "worker"]
    assert spec.master_port == 29400


def test_a_gpu_job_keeps_its_queue_gang_resources_volumes_and_pod_fields() -> None:
    result = translate(doc(GPU_JOB))
    spec = result.manifest.spec
    (task,) = spec.tasks
    assert (spec.queue, spec.priority_class, spec.min_available) == ("vision", "high", 4)
    assert (spec.restart_policy, spec.backoff_limit) == ("OnFailure", 5)
    assert spec.termination_grace_period == 120
    assert spec.index_env == ["VK_TASK_INDEX", "VC_TASK_INDEX"]
    assert spec.master_port is None
    assert (task.resources.gpu, task.resources.cpu, task.resources.memory) == (8, 32000, 256 * GI)
    assert task.env == {"NCCL_DEBUG": "INFO", "EPOCHS": "3"}
    assert task.node_selector == {"nvidia.com/gpu.product": "H100-SXM"}
    assert task.annotations == {"kiban.dev/sim-duration": "2s"}
    assert [(v.claim_name, v.mount_path, v.read_only) for v in task.volumes] == [
        ("llm-checkpoints", "/ckpt", False),
        (None, "/dev/shm", False),
        ("shared-datasets", "/data", False),
    ]
    shm = task.volumes[1].empty_dir
    assert shm is not None and shm.medium == "Memory"  # kept: NCCL needs /dev/shm in memory
    assert task.resources.extended == {"rdma/hca": 1}  # kept: the pods' RDMA devices
    warnings = " | ".join(result.warnings)
    assert "spec.tasks[0].template.spec.tolerations" in warnings
    for kept in ("rdma/hca", "emptyDir"):
        assert kept not in warnings
    assert "metadata.namespace" in warnings
    assert spec.hosts_files  # the svc plugin: /etc/volcano/<task>.host, VC_<TASK>_HOSTS, _NUM
    assert "spec.plugins.svc" not in warnings


def test_without_the_svc_plugin_no_hosts_files() -> None:
    data = doc(GPU_JOB)
    del data["spec"]["plugins"]["svc"]
    assert not translate(data).manifest.spec.hosts_files


def test_the_translation_is_stored_as_a_kiban_job_that_parses_the_same() -> None:
    submission = parse_submission(doc(GPU_JOB))
    assert submission.document["apiVersion"] == "kiban/v1"
    assert parse_job_manifest(submission.document) == submission.manifest
    assert parse_job_manifest(doc(GPU_JOB)) == submission.manifest  # dispatch on apiVersion


def test_a_kiban_job_is_stored_as_written_without_warnings() -> None:
    kiban = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "a"},
        "spec": {"tasks": [{"command": ["true"]}]},
    }
    submission = parse_submission(kiban)
    assert submission.document is kiban
    assert submission.warnings == ()


@pytest.mark.parametrize(
    ("path", "value", "field", "says"),
    [
        (
            ["spec", "tasks", 0, "template", "spec", "containers"],
            [{"name": "a", "command": ["x"]}, {"name": "b", "command": ["y"]}],
            "spec.tasks[0].template.spec.containers",
            "exactly one container",
        ),
        (
            ["spec", "tasks", 0, "template", "spec", "containers", 0, "command"],
            None,
            "spec.tasks[0].template.spec.containers[0].command",
            "entrypoint",
        ),
        (
            ["spec", "tasks", 0, "template", "spec", "containers", 0, "env"],
            [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
            "spec.tasks[0].template.spec.containers[0].env[0].valueFrom",
            "give a value",
        ),
        (
            ["spec", "tasks", 0, "template", "spec", "containers", 0, "resources"],
            {"requests": {"cpu": "lots"}},
            "spec.tasks[0].template.spec.containers[0].resources.cpu",
            "",
        ),
        (
            ["spec", "tasks", 0, "template", "spec", "containers", 0, "resources"],
            {"requests": {"nvidia.com/gpu": 4}, "limits": {"nvidia.com/gpu": 8}},
            "spec.tasks[0].template.spec.containers[0].resources.requests.nvidia.com/gpu",
            "must equal",
        ),
        (
            ["spec", "tasks", 0, "template", "spec", "volumes", 0],
            {"name": "checkpoints", "hostPath": {"path": "/mnt"}},
            "spec.tasks[0].template.spec.volumes[0].hostPath",
            "persistentVolumeClaim",
        ),
        (
            ["spec", "volumes", 0],
            {"mountPath": "/data", "volumeClaim": {"accessModes": ["ReadWriteMany"]}},
            "spec.volumes[0].volumeClaimName",
            "does not create",
        ),
        (["spec", "plugins"], {"ray": []}, "spec.plugins.ray", "not supported"),
        (["spec", "plugins"], {"pytorch": ["--master=chief"]}, "spec.plugins.pytorch", "chief"),
        (["spec", "plugins"], {"pytorch": ["--port=99999"]}, "spec.plugins.pytorch", "port"),
        (["spec", "plugins"], {"pytorch": ["--nnodes=2"]}, "spec.plugins.pytorch[0]", "unknown"),
        (
            ["spec", "policies"],
            [{"event": "PodFailed", "action": "Reboot"}],
            "spec.policies[0].action",
            "unknown action",
        ),
        (["spec", "tasks", 0, "replicas"], "two", "spec.tasks[0].replicas", "integer"),
        (["spec", "tazks"], [], "spec.tazks", "unknown field"),
        (
            ["spec", "tasks", 0, "template", "spec", "initContainers"],
            [{"name": "fetch"}],
            "spec.tasks[0].template.spec.initContainers",
            "not supported",
        ),
    ],
)
def test_a_bad_field_is_refused_naming_its_volcano_path(
    path: list[Any], value: Any, field: str, says: str
) -> None:
    data = copy.deepcopy(doc(GPU_JOB))
    node: Any = data
    for part in path[:-1]:
        node = node[part]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    with pytest.raises(SpecError) as caught:
        translate(data)
    fields = [p.field for p in caught.value.problems]
    assert field in fields, caught.value.problems
    assert says in str(caught.value)


def test_policies_map_to_restart_semantics() -> None:
    data = doc(PYTORCH)
    for task in data["spec"]["tasks"]:
        task["template"]["spec"]["restartPolicy"] = "Never"
    assert translate(data).manifest.spec.restart_policy == "Never"
    data["spec"]["policies"] = [{"event": "PodFailed", "action": "AbortJob"}]
    assert translate(data).manifest.spec.restart_policy == "Never"
    data["spec"]["policies"] = [{"events": ["PodFailed"], "action": "RestartTask"}]
    result = translate(data)
    assert result.manifest.spec.restart_policy == "OnFailure"
    assert any("restarts the whole job" in w for w in result.warnings)
    data["spec"]["policies"] = [{"event": "PodPending", "action": "AbortJob", "timeout": "1h"}]
    result = translate(data)
    assert result.manifest.spec.restart_policy == "Never"
    assert any("spec.policies[0] (PodPending -> AbortJob)" in w for w in result.warnings)
