"""A Volcano Job manifest submitted unchanged to kiban on Kubernetes: its pods carry what the
file asked for (image, limits, claims, the pytorch plugin's environment) and the job completes
through KWOK's sim-duration stage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_platform import (
    NAMESPACE,
    empty_the_cluster,
    env_of,
    events,
    get,
    job_pods,
    kube_platform,
    state,
    submit,
)
from kube_support import eventually

from kiban.devtools.kube import ControlPlane
from kiban.domain.manifests import load_document
from kiban.platform import Platform

pytestmark = pytest.mark.kube

VOLCANO_JOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: pytorch-ddp
  namespace: research
spec:
  schedulerName: volcano
  minAvailable: 3
  maxRetry: 2
  plugins:
    pytorch: ["--master=master", "--worker=worker", "--port=23456"]
    env: []
    svc: []
  volumes:
    - mountPath: /data
      volumeClaimName: shared-data
  tasks:
    - name: master
      replicas: 1
      policies:
        - {event: TaskCompleted, action: CompleteJob}
      template:
        metadata:
          annotations: {kiban.dev/sim-duration: 3s}
        spec:
          restartPolicy: OnFailure
          containers:
            - name: master
              image: registry.example/pytorch-ddp:2.5
              imagePullPolicy: IfNotPresent
              command: ["python", "/workspace/train.py"]
              args: ["--epochs", "1"]
              env: [{name: NCCL_DEBUG, value: INFO}]
              resources:
                requests: {cpu: "2", memory: 8Gi}
                limits: {memory: 8Gi, nvidia.com/gpu: 2}
    - name: worker
      replicas: 2
      template:
        metadata:
          annotations: {kiban.dev/sim-duration: 3s}
        spec:
          restartPolicy: OnFailure
          containers:
            - name: worker
              image: registry.example/pytorch-ddp:2.5
              command: ["python", "/workspace/train.py"]
              args: ["--epochs", "1"]
              env: [{name: NCCL_DEBUG, value: INFO}]
              resources:
                requests: {cpu: "2", memory: 8Gi}
                limits: {memory: 8Gi, nvidia.com/gpu: 2}
              volumeMounts: [{name: ckpt, mountPath: /ckpt}]
          volumes:
            - name: ckpt
              persistentVolumeClaim: {claimName: checkpoints}
"""


@pytest.fixture
def platform(control_plane: ControlPlane, core: Any, tmp_path: Path) -> Iterator[Platform]:
    empty_the_cluster(core)
    with kube_platform(control_plane, tmp_path / "home") as built:
        yield built
    empty_the_cluster(core)


def test_volcano_job_runs_as_pods_with_its_fields_and_completes(
    platform: Platform, core: Any
) -> None:
    job_id = submit(platform, load_document(VOLCANO_JOB))
    pods = eventually(
        lambda: (
            (p := job_pods(core, job_id))
            and len(p) == 3
            and all(x.status.phase == "Running" for x in p)
            and p
        ),
        what="3 running pods",
    )
    master = f"{pods[0].metadata.name}.{pods[0].spec.subdomain}.{NAMESPACE}.svc.cluster.local"
    assert [p.metadata.labels["kiban.dev/task"] for p in pods] == ["master", "worker", "worker"]
    for rank, pod in enumerate(pods):
        assert pod.metadata.namespace == NAMESPACE  # the tenant's, not the file's "research"
        env = env_of(pod)
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (master, "23456")
        assert (env["WORLD_SIZE"], env["RANK"]) == ("3", str(rank))
        assert env["VC_TASK_INDEX"] == env["VK_TASK_INDEX"] == str(max(rank - 1, 0))
        assert env["NCCL_DEBUG"] == "INFO"
        container = pod.spec.containers[0]
        assert container.image == "registry.example/pytorch-ddp:2.5"
        assert container.command == ["python", "/workspace/train.py", "--epochs", "1"]
        assert container.resources.limits["nvidia.com/gpu"] == "2"
        assert container.resources.requests["cpu"] == "2"
        assert container.resources.limits["memory"] == str(8 * 2**30)
        claims = {
            v.name: v.persistent_volume_claim.claim_name
            for v in pod.spec.volumes
            if v.persistent_volume_claim
        }
        mounts = {m.name: m.mount_path for m in container.volume_mounts}
        # the svc plugin: the hosts by task in /etc/volcano and the variables
        assert mounts["volcano-hosts"] == "/etc/volcano"
        assert (env["VC_MASTER_HOSTS"], env["VC_MASTER_NUM"]) == (master, "1")
        assert env["VC_WORKER_NUM"] == "2"
        assert claims["volume-0"] == "shared-data" and mounts["volume-0"] == "/data"
        if rank > 0:
            assert (claims["ckpt"], mounts["ckpt"]) == ("checkpoints", "/ckpt")
        assert pod.metadata.annotations["kiban.dev/sim-duration"] == "3s"
    assert get(platform, job_id).master_port == 23456
    eventually(
        lambda: state(platform, job_id) == "Succeeded", what="the job to succeed", timeout=30
    )
    reasons = dict(events(platform, job_id))
    assert "local executor" not in reasons.get("SubmittedWithWarnings", "")
    assert "metadata.namespace" in reasons["SubmittedWithWarnings"]
