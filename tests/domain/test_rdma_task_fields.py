"""The task fields RDMA jobs need on Kubernetes: securityContext (capabilities such as
IPC_LOCK) and emptyDir volumes (``medium: Memory`` at /dev/shm); bad input names its field."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.errors import SpecError
from kiban.domain.manifests import parse_job_manifest


def job(**task: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "nccl"},
        "spec": {"tasks": [{"command": ["all_reduce_perf"], **task}]},
    }


def test_the_fields_are_read_and_written_back() -> None:
    document = job(
        securityContext={"capabilities": {"add": ["IPC_LOCK"]}, "privileged": False},
        volumes=[{"name": "shm", "mountPath": "/dev/shm", "emptyDir": {"medium": "Memory"}}],
    )
    task = parse_job_manifest(document).spec.tasks[0]
    assert task.security_context is not None and task.security_context.capabilities is not None
    assert task.security_context.capabilities.add == ["IPC_LOCK"]
    assert task.volumes[0].empty_dir is not None and task.volumes[0].empty_dir.medium == "Memory"
    assert task.container_fields() == ["volumes", "securityContext"]  # the local executor warns
    again = parse_job_manifest(parse_job_manifest(document).model_dump(by_alias=True, mode="json"))
    assert again.spec.tasks[0] == task


@pytest.mark.parametrize(
    ("task", "field", "message"),
    [
        (
            {"securityContext": {"capabilities": {"add": ["CAP_IPC_LOCK"]}}},
            "spec.tasks[0].securityContext.capabilities.add",
            "not a capability name",
        ),
        (
            {"securityContext": {"seccompProfile": {}}},
            "spec.tasks[0].securityContext.seccompProfile",
            "",
        ),
        (
            {"volumes": [{"name": "shm", "mountPath": "/dev/shm"}]},
            "spec.tasks[0].volumes[0].claimName",
            "exactly one of claimName",
        ),
        (
            {
                "volumes": [
                    {"name": "v", "mountPath": "/v", "claimName": "c", "emptyDir": {}},
                ]
            },
            "spec.tasks[0].volumes[0].claimName",
            "exactly one of claimName",
        ),
        (
            {"volumes": [{"name": "shm", "mountPath": "/dev/shm", "emptyDir": {"medium": "Disk"}}]},
            "spec.tasks[0].volumes[0].emptyDir.medium",
            "",
        ),
    ],
)
def test_bad_input_names_its_field(task: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job_manifest(job(**task))
    fields = [p.field for p in caught.value.problems]
    assert field in fields, caught.value.problems
    assert message in caught.value.problems[fields.index(field)].message
