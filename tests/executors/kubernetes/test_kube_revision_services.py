"""The Services of inference-service revisions that the executor lists, so that a restarted
control plane can remove the ones it no longer remembers: by kiban's labels, each named by
its tenant and revision. A stand-in for the API plays the server; the kube tier runs against
the real one."""

from __future__ import annotations

from typing import Any

import pytest
from kube_fakes import executor_over

from kiban.executors.kubernetes import KubernetesOptions
from kiban.executors.kubernetes.pods import revision_service_manifest

Obj = dict[str, Any]


class ListedServices:
    """Answers every Service list with ``services``, remembering the selectors asked."""

    def __init__(self, services: list[Obj]) -> None:
        self.services = services
        self.selectors: list[str] = []

    def list_services(self, selector: str) -> list[Obj]:
        self.selectors.append(selector)
        return self.services

    def close(self) -> None:
        pass


def listed(
    monkeypatch: pytest.MonkeyPatch, services: list[Obj]
) -> tuple[dict[tuple[str, str], str], list[str]]:
    """What the executor lists over these Services, and the selectors it asked with."""
    api = ListedServices(services)
    kube = executor_over(monkeypatch, api, KubernetesOptions())
    try:
        return kube.published_revisions(), api.selectors
    finally:
        kube.close()


def test_a_revision_service_carries_its_tenant() -> None:
    body = revision_service_manifest("kiban-team-a", "team-a", "chat", "chat-00001", 8080)
    assert body["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "kiban",
        "kiban.dev/tenant": "team-a",
        "kiban.dev/service": "chat",
        "kiban.dev/revision": "chat-00001",
    }


def test_the_revision_services_are_listed_by_tenant_and_revision_with_their_addresses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = revision_service_manifest("kiban-team-a", "team-a", "chat", "chat-00001", 8080)
    older = revision_service_manifest("kiban-team-b", "team-b", "qa", "qa-00002", 8080)
    del older["metadata"]["labels"]["kiban.dev/tenant"]  # made before Services carried it
    foreign = revision_service_manifest("other-team-c", "team-c", "x", "x-00001", 8080)
    found, selectors = listed(monkeypatch, [made, older, foreign])
    assert selectors == ["app.kubernetes.io/managed-by=kiban,kiban.dev/revision"]
    assert found == {
        ("team-a", "chat-00001"): "kbs-chat-00001.kiban-team-a.svc.cluster.local:80",
        ("team-b", "qa-00002"): "kbs-qa-00002.kiban-team-b.svc.cluster.local:80",
    }  # not one in a namespace that is no tenant's under this prefix: kiban could not delete it
