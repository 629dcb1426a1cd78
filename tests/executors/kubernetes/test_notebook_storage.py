"""The volume claim that keeps a notebook's directory on Kubernetes: a name that is a DNS label
for any member's name and never shared by two notebooks; the API's refusals said in words."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from kiban.domain.jobspec import check_dns_label
from kiban.executors.kubernetes import KubernetesOptions
from kiban.executors.kubernetes.notebook_storage import (
    KubeNotebookStorage,
    claim_manifest,
    claim_name,
)


@pytest.mark.parametrize(
    ("owner", "name"),
    [("alice", "lab"), ("Alice Smith/../x", "lab"), ("ä" * 80, "n" * 63), ("---", "a")],
)
def test_the_claim_name_is_a_dns_label(owner: str, name: str) -> None:
    made = claim_name(owner, name)
    assert check_dns_label(made, "claim") == made and len(made) <= 63


def test_two_members_or_two_notebooks_never_share_a_claim() -> None:
    names = {
        claim_name("alice smith", "lab"),
        claim_name("alice-smith", "lab"),  # cleaned alike, kept apart by the hash
        claim_name("alice smith", "lab2"),
        claim_name("bob", "lab"),
    }
    assert len(names) == 4
    assert claim_name("alice smith", "lab") == claim_name("alice smith", "lab")  # the same again


def test_the_claim_asks_for_the_configured_size_and_class() -> None:
    options = KubernetesOptions(notebook_storage="50Gi", notebook_storage_class="fast")
    claim = claim_manifest("vision", "alice", "lab", "kiban-vision", options)
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    assert "storageClassName" not in claim_manifest("v", "a", "l", "n", KubernetesOptions())["spec"]


class RefusingApi:
    """A CoreApi whose namespace exists already and which refuses claims."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.made: list[str] = []

    def create_namespace(self, body: dict[str, Any]) -> None:
        raise ApiException(status=409, reason="AlreadyExists")

    def create_claim(self, namespace: str, body: dict[str, Any]) -> None:
        self.made.append(body["metadata"]["name"])
        raise ApiException(status=self.status, reason="Forbidden")


def test_a_claim_that_exists_is_taken_and_a_refusal_says_why() -> None:
    storage = KubeNotebookStorage(RefusingApi(409), KubernetesOptions())  # type: ignore[arg-type]
    runtime = storage.notebook_runtime("vision", "alice", "lab")
    assert runtime.root_dir == "/kiban/notebooks/lab" and runtime.listen == "0.0.0.0"
    assert runtime.volumes[0]["claimName"] == claim_name("alice", "lab")
    refused = KubeNotebookStorage(RefusingApi(403), KubernetesOptions())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="refused the notebook's PersistentVolumeClaim nb-"):
        refused.notebook_runtime("vision", "alice", "lab")
