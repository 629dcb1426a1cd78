"""An attempt's credentials on Kubernetes: in a Secret of the attempt that its pods refer to,
never values in a pod spec; the Secret made before the pods and deleted with the attempt, also
when the launch is refused. A scripted stand-in for the API; the kube tier checks the real one."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kube_fakes import OPTIONS, executor_over
from kubernetes.client.exceptions import ApiException

from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import LaunchError, LaunchRequest, ReplicaRef
from kiban.executors.kubernetes import env_secrets
from kiban.executors.kubernetes.pods import pod_manifest
from kiban.scheduler.decisions import ReplicaPlacement

Obj = dict[str, Any]
TOKEN = "kbn_job_token_secret_value"
JUPYTER = "f" * 64


def request(replicas: int = 2, api_env: dict[str, str] | None = None) -> LaunchRequest:
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "g"},
        "spec": {"tasks": [{"name": "w", "replicas": replicas, "command": ["true"]}]},
    }
    spec = parse_job_manifest(document).spec
    placements = tuple(
        ReplicaPlacement("w", i, i, f"node-{i}", (), 1000, 2**30) for i in range(replicas)
    )
    env = {"KIBAN_URL": "http://kiban:8470", "KIBAN_TOKEN": TOKEN} if api_env is None else api_env
    return LaunchRequest("g-abc123", "g", "t", 1, spec, placements, 29500, api_env=env)


def bodies(launch: LaunchRequest) -> list[Obj]:
    return [pod_manifest(launch, p, "kiban-t", OPTIONS) for p in launch.placements]


def test_credentials_become_references_to_the_attempts_secret() -> None:
    launch = request(
        api_env={"KIBAN_URL": "http://kiban:8470", "KIBAN_TOKEN": TOKEN, "JUPYTER_TOKEN": JUPYTER}
    )
    pods = bodies(launch)
    secret = env_secrets.prepare(launch, pods, "kiban-t")
    assert secret is not None
    name = secret["metadata"]["name"]
    assert name == env_secrets.secret_name("g-abc123", 1)
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {
        "KIBAN_TOKEN": TOKEN,
        "JUPYTER_TOKEN": JUPYTER,
    }
    for pod in pods:
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["KIBAN_URL"] == {"name": "KIBAN_URL", "value": "http://kiban:8470"}
        for key in ("KIBAN_TOKEN", "JUPYTER_TOKEN"):
            assert env[key] == {
                "name": key,
                "valueFrom": {"secretKeyRef": {"name": name, "key": key}},
            }
        assert TOKEN not in json.dumps(pod) and JUPYTER not in json.dumps(pod)
        assert env_secrets.refers_to_secret(pod)


def test_an_attempt_without_credentials_has_no_secret() -> None:
    launch = request(api_env={"KIBAN_URL": "http://kiban:8470"})
    pods = bodies(launch)
    before = json.dumps(pods)
    assert env_secrets.prepare(launch, pods, "kiban-t") is None
    assert json.dumps(pods) == before
    assert not any(env_secrets.refers_to_secret(pod) for pod in pods)


class RecordingApi:
    """Records what is created and deleted, in order; refuses the pods named in ``refuse``."""

    def __init__(self, refuse: set[str] | None = None, secret_exists: bool = False) -> None:
        self.refuse = refuse or set()
        self.calls: list[tuple[str, str]] = []
        self.secrets: dict[str, Obj] = {}
        self.secret_exists = secret_exists
        self.pods: list[Obj] = []

    def list_nodes(self, label_selector: str = "") -> list[Obj]:
        return []

    def list_pods(self, *, label_selector: str = "", field_selector: str = "") -> Obj:
        return {"metadata": {"resourceVersion": "1"}, "items": list(self.pods)}

    def watch_pods(self, *args: Any) -> Any:
        raise RuntimeError("no watch here")

    def create_namespace(self, body: Obj) -> Obj:
        return body

    def create_service(self, namespace: str, body: Obj) -> Obj:
        return {"metadata": {**body["metadata"], "uid": "svc-uid"}}

    def list_services(self, selector: str) -> list[Obj]:
        return []

    def delete_service(self, namespace: str, name: str) -> None:
        self.calls.append(("delete service", name))

    def create_secret(self, namespace: str, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        if self.secret_exists:
            self.secret_exists = False
            raise ApiException(status=409, reason="AlreadyExists")
        self.calls.append(("create secret", name))
        self.secrets[name] = body
        return body

    def delete_secret(self, namespace: str, name: str) -> None:
        self.calls.append(("delete secret", name))
        if self.secrets.pop(name, None) is None:
            raise ApiException(status=404, reason="NotFound")

    def create_pod(self, namespace: str, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        if name in self.refuse:
            raise ApiException(status=422, reason="Unprocessable Entity")
        self.calls.append(("create pod", name))
        made = {**body, "metadata": {**body["metadata"], "uid": f"uid-{name}"}}
        self.pods.append(made)
        return made

    def read_pod(self, namespace: str, name: str) -> Obj:
        pod = next(p for p in self.pods if p["metadata"]["name"] == name)
        return {**pod, "status": {"phase": "Running"}}

    def delete_pod(self, namespace: str, name: str, **kwargs: Any) -> None:
        self.calls.append(("delete pod", name))

    def close(self) -> None:
        pass


SECRET = env_secrets.secret_name("g-abc123", 1)


def test_the_secret_is_made_before_the_pods_and_goes_with_the_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = RecordingApi()
    kube = executor_over(monkeypatch, api)
    try:
        launched = kube.launch(request())
        assert api.calls[0] == ("create secret", SECRET)
        assert [c for c in api.calls if c[0] == "create pod"]
        assert TOKEN not in json.dumps(api.pods)
        secret = api.secrets[SECRET]
        assert secret["metadata"]["ownerReferences"][0]["kind"] == "Service"
        api.calls.clear()
        first = launched[0]
        kube.stop(ReplicaRef("g-abc123", 1, "w", 0, 0, first.handle), force=True)
    finally:
        kube.close()
    assert ("delete secret", SECRET) in api.calls
    assert SECRET not in api.secrets


def test_a_refused_launch_deletes_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    api = RecordingApi(refuse={"kb-g-abc123-1-0"})
    kube = executor_over(monkeypatch, api)
    try:
        with pytest.raises(LaunchError):
            kube.launch(request())
    finally:
        kube.close()
    assert api.secrets == {}


def test_a_secret_left_by_an_earlier_try_of_the_attempt_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = RecordingApi(secret_exists=True)
    api.secrets[SECRET] = {"data": {"KIBAN_TOKEN": "old"}}
    kube = executor_over(monkeypatch, api)
    try:
        kube.launch(request())
    finally:
        kube.close()
    assert api.calls[:2] == [("delete secret", SECRET), ("create secret", SECRET)]
    assert base64.b64decode(api.secrets[SECRET]["data"]["KIBAN_TOKEN"]).decode() == TOKEN
