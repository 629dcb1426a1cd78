"""Volcano jobs as Oracle's OKE runs NCCL tests: RDMA devices (``nvidia.com/hostdev``),
hugepages, ``/dev/shm`` in memory, IPC_LOCK and a Multus network annotation all reach the
kiban job (and so its pods), where they were once dropped with a warning."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.errors import SpecError
from kiban.domain.manifests import load_document
from kiban.domain.volcano import translate

GI = 2**30
OKE_JOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: nccl-allreduce
spec:
  minAvailable: 2
  schedulerName: volcano
  tasks:
    - name: worker
      replicas: 2
      template:
        metadata:
          annotations:
            k8s.v1.cni.cncf.io/networks: sriov-rdma-vf,sriov-rdma-vf,sriov-rdma-vf
        spec:
          containers:
            - name: nccl
              image: iad.ocir.io/hpc/nccl-tests:cuda12
              command: ["/opt/nccl-tests/build/all_reduce_perf", "-b", "1G", "-e", "8G"]
              securityContext:
                capabilities:
                  add: [IPC_LOCK]
              resources:
                requests: {nvidia.com/gpu: 8, nvidia.com/hostdev: 16, hugepages-2Mi: 1Gi}
                limits: {nvidia.com/gpu: 8, nvidia.com/hostdev: 16, hugepages-2Mi: 1Gi,
                         memory: 64Gi}
              volumeMounts:
                - {name: devinf, mountPath: /dev/infiniband}
                - {name: shm, mountPath: /dev/shm}
          volumes:
            - name: devinf
              hostPath: {path: /dev/infiniband}
            - name: shm
              emptyDir: {medium: Memory, sizeLimit: 32Gi}
"""


def oke(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = load_document(OKE_JOB)
    container = document["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container.update(changes)
    return document


def without_host_path() -> dict[str, Any]:
    document = oke()
    pod = document["spec"]["tasks"][0]["template"]["spec"]
    pod["volumes"] = pod["volumes"][1:]
    pod["containers"][0]["volumeMounts"] = pod["containers"][0]["volumeMounts"][1:]
    return document


def test_the_rdma_fields_are_kept() -> None:
    result = translate(without_host_path())
    (task,) = result.manifest.spec.tasks
    assert task.resources.gpu == 8
    assert task.resources.extended == {"nvidia.com/hostdev": 16, "hugepages-2Mi": GI}
    assert task.security_context is not None and task.security_context.capabilities is not None
    assert task.security_context.capabilities.add == ["IPC_LOCK"]
    (shm,) = task.volumes
    assert shm.mount_path == "/dev/shm" and shm.empty_dir is not None
    assert (shm.empty_dir.medium, shm.empty_dir.size_limit) == ("Memory", 32 * GI)
    assert task.annotations["k8s.v1.cni.cncf.io/networks"].count("sriov-rdma-vf") == 3
    warnings = " | ".join(result.warnings)
    for kept in ("hostdev", "hugepages", "emptyDir", "securityContext"):
        assert kept not in warnings


def test_a_host_path_volume_is_refused_naming_it() -> None:
    with pytest.raises(SpecError) as caught:
        translate(oke())
    fields = [p.field for p in caught.value.problems]
    assert "spec.tasks[0].template.spec.volumes[0].hostPath" in fields


def test_requests_and_limits_of_an_extended_resource_must_agree() -> None:
    document = without_host_path()
    resources = document["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
    resources["requests"]["nvidia.com/hostdev"] = 8
    with pytest.raises(SpecError) as caught:
        translate(document)
    (problem,) = caught.value.problems
    assert problem.field == (
        "spec.tasks[0].template.spec.containers[0].resources.requests.nvidia.com/hostdev"
    )
    assert "must equal limits.nvidia.com/hostdev (16)" in problem.message


def test_a_bad_capability_names_the_volcano_field() -> None:
    document = without_host_path()
    container = document["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["securityContext"] = {"capabilities": {"add": ["ipc_lock"]}}
    with pytest.raises(SpecError) as caught:
        translate(document)
    (problem,) = caught.value.problems
    assert problem.field.startswith(
        "spec.tasks[0].template.spec.containers[0].securityContext.capabilities.add"
    )
    assert "not a capability name" in problem.message
