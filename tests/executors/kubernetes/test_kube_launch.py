"""Launching a gang: its pods are created several at a time, in order, and a refusal leaves
nothing behind; the node sync lists only pods kiban did not create. A scripted stand-in for the
API plays the server; the kube tier runs against the real one."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kube_fakes import executor_over
from kubernetes.client.exceptions import ApiException

from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import EXIT_CANNOT_START, LaunchError, LaunchRequest, ReplicaRef
from kiban.executors.kubernetes import KubernetesOptions
from kiban.executors.kubernetes.executor import LAUNCH_WORKERS
from kiban.executors.kubernetes.pods import PULL_DEADLINE_S
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.testing import ManualClock

Obj = dict[str, Any]


class ScriptedApi:
    """Creates pods after a short delay, counting how many are in flight; refuses ``refuse``."""

    def __init__(self, refuse: set[str] | None = None) -> None:
        self.refuse = refuse or set()
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.pod_lists: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def list_nodes(self, label_selector: str = "") -> list[Obj]:
        return []

    def list_pods(self, *, label_selector: str = "", field_selector: str = "") -> Obj:
        self.pod_lists.append((label_selector, field_selector))
        with self._lock:
            items = [{"metadata": {"namespace": "kiban-t", "name": n}} for n in self.created]
        return {"metadata": {"resourceVersion": "1"}, "items": items}

    def watch_pods(self, *args: Any) -> Any:
        raise RuntimeError("no watch here")

    def create_namespace(self, body: Obj) -> Obj:
        return body

    def create_service(self, namespace: str, body: Obj) -> Obj:
        return {"metadata": {**body["metadata"], "uid": "svc-uid"}}

    def list_services(self, selector: str) -> list[Obj]:
        return []

    def create_pod(self, namespace: str, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        # The API's round trip, not a wait for anything: requests must take time for the
        # launch to overlap them and for a refusal to find later ones not yet sent.
        time.sleep(0.01)
        with self._lock:
            self.in_flight -= 1
            if name in self.refuse:
                raise ApiException(status=422, reason="Unprocessable Entity")
            self.created.append(name)
        return {"metadata": {**body["metadata"], "uid": f"uid-{name}", "resourceVersion": "2"}}

    def delete_pod(self, namespace: str, name: str, **kwargs: Any) -> None:
        self.deleted.append(name)

    def close(self) -> None:
        pass


def gang(replicas: int) -> LaunchRequest:
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "g"},
        "spec": {"tasks": [{"name": "w", "replicas": replicas, "command": ["true"]}]},
    }
    spec = parse_job_manifest(document).spec
    placements = tuple(
        ReplicaPlacement("w", i, i, f"node-{i}", (0,), 1000, 2**30) for i in range(replicas)
    )
    return LaunchRequest("g-abc123", "g", "t", 1, spec, placements, 29500)


def test_a_gang_is_created_several_pods_at_a_time_in_rank_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = ScriptedApi()
    kube = executor_over(monkeypatch, api)
    try:
        launched = kube.launch(gang(40))
    finally:
        kube.close()
    assert [r.rank for r in launched] == list(range(40))
    assert [r.handle for r in launched] == [
        f"kiban-t/kb-g-abc123-1-{i}/uid-kb-g-abc123-1-{i}" for i in range(40)
    ]
    assert sorted(api.created) == sorted(f"kb-g-abc123-1-{i}" for i in range(40))
    assert 1 < api.most_in_flight <= LAUNCH_WORKERS


def test_a_refused_pod_fails_the_launch_and_every_pod_made_is_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = ScriptedApi(refuse={"kb-g-abc123-1-5"})
    kube = executor_over(monkeypatch, api)
    try:
        with pytest.raises(LaunchError, match="refused"):
            kube.launch(gang(200))
    finally:
        kube.close()
    assert api.in_flight == 0  # nothing still being created behind the cleanup
    assert sorted(api.deleted) == sorted(api.created)
    assert len(api.created) < 199  # the requests not yet sent were dropped


def test_the_node_sync_lists_only_live_pods_kiban_did_not_create(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = ScriptedApi()
    kube = executor_over(monkeypatch, api)
    try:
        kube.nodes()
    finally:
        kube.close()
    ((labels, fields),) = api.pod_lists
    assert labels == "app.kubernetes.io/managed-by!=kiban"
    assert "spec.nodeName!=" in fields and "status.phase!=Succeeded" in fields


def test_observing_a_pod_counts_its_wait_for_the_image_on_the_executors_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waiting = {"reason": "ErrImagePull", "message": "manifest unknown"}
    pod = {
        "metadata": {"uid": "u1", "creationTimestamp": "2026-11-25T12:00:00Z"},
        "spec": {"nodeName": "node-0"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "main", "state": {"waiting": waiting}}],
        },
    }
    api = ScriptedApi()
    api.read_pod = lambda namespace, name: pod  # type: ignore[attr-defined]
    clock = ManualClock(datetime(2026, 11, 25, 12, 5, tzinfo=UTC).timestamp())
    kube = executor_over(monkeypatch, api, KubernetesOptions(), clock=clock)
    replica = ReplicaRef("g-abc123", 1, "w", 0, 0, "kiban-t/kb-g-abc123-1-0/u1")
    try:
        assert kube.observe(replica).running  # five minutes in: the kubelet keeps trying
        clock.advance(PULL_DEADLINE_S)
        seen = kube.observe(replica)
    finally:
        kube.close()
    assert (seen.running, seen.exit_code) == (False, EXIT_CANNOT_START)
    assert "ErrImagePull: manifest unknown" in seen.message
