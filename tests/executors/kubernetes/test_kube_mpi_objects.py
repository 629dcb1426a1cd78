"""An MPI attempt's objects on Kubernetes (pure parts, table-driven), and the executor's
launcher held back until its workers run: after a restart too, and never once stopped. A
small in-memory stand-in plays the API server; the kube tier runs against the real one."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from kiban.domain.manifests import load_document, parse_submission
from kiban.domain.mpi import MpiImplementation
from kiban.executors.base import LaunchRequest, ReplicaRef
from kiban.executors.kubernetes import KubernetesOptions, executor, mpi_objects
from kiban.executors.kubernetes.executor import KubernetesExecutor
from kiban.scheduler.decisions import ReplicaPlacement

Obj = dict[str, Any]
HOSTS = ["w-1.svc.ns.svc.cluster.local", "w-2.svc.ns.svc.cluster.local"]


@pytest.mark.parametrize(
    ("implementation", "hostfile_variable"),
    [
        (MpiImplementation.OPEN_MPI, "OMPI_MCA_orte_default_hostfile"),
        (MpiImplementation.MPICH, "HYDRA_HOST_FILE"),
        (MpiImplementation.INTEL, "I_MPI_HYDRA_HOST_FILE"),
    ],
)
def test_the_launcher_is_told_the_hostfile_in_its_implementations_variable(
    implementation: MpiImplementation, hostfile_variable: str
) -> None:
    env = mpi_objects.launcher_environment(implementation, HOSTS)
    assert env[hostfile_variable] == "/etc/mpi/hostfile"
    assert env["MPI_HOST"] == ",".join(HOSTS)
    others = {"OMPI_MCA_orte_default_hostfile", "HYDRA_HOST_FILE", "I_MPI_HYDRA_HOST_FILE"}
    assert not (others - {hostfile_variable}) & set(env)


def test_a_key_pair_is_a_private_key_and_its_authorized_keys_line() -> None:
    private, public = mpi_objects.ssh_key_pair()
    key = serialization.load_ssh_private_key(private, password=None)
    line = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert public == line + b"\n"
    assert mpi_objects.ssh_key_pair()[0] != private  # new keys for every attempt


# -- the executor, against a stand-in API ----------------------------------------------------

MPIJOB = """
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: pi}
spec:
  slotsPerWorker: 1
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers: [{name: l, image: mpi:1, command: [mpirun, -n, "2", pi]}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: w, image: mpi:1, command: [/usr/sbin/sshd, -De]}]
"""


class Cluster:
    """The objects the stand-in API server holds, by (namespace, name)."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], Obj] = {}
        self.config_maps: dict[tuple[str, str], Obj] = {}
        self.secrets: dict[tuple[str, str], Obj] = {}
        self.services: dict[tuple[str, str], Obj] = {}

    def run(self, *names: str) -> None:
        for (_, name), pod in self.pods.items():
            if name in names:
                pod["status"] = {"phase": "Running"}


class Api:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

    @staticmethod
    def _missing() -> Exception:
        from kubernetes.client.exceptions import ApiException

        return ApiException(status=404, reason="Not Found")

    def _add(self, store: dict[tuple[str, str], Obj], namespace: str, body: Obj) -> Obj:
        made = {**body, "metadata": {**body["metadata"], "uid": f"uid-{body['metadata']['name']}"}}
        store[(namespace, body["metadata"]["name"])] = made
        return made

    def create_namespace(self, body: Obj) -> Obj:
        return body

    def create_service(self, namespace: str, body: Obj) -> Obj:
        return self._add(self.c.services, namespace, body)

    def delete_service(self, namespace: str, name: str) -> None:
        self.c.services.pop((namespace, name), None)

    def list_services(self, selector: str) -> list[Obj]:
        return []

    def create_pod(self, namespace: str, body: Obj) -> Obj:
        return self._add(self.c.pods, namespace, {**body, "status": {"phase": "Pending"}})

    def read_pod(self, namespace: str, name: str) -> Obj:
        if (namespace, name) not in self.c.pods:
            raise self._missing()
        return self.c.pods[(namespace, name)]

    def delete_pod(self, namespace: str, name: str, **kwargs: Any) -> None:
        self.c.pods.pop((namespace, name), None)

    def list_pods(self, *, label_selector: str = "", field_selector: str = "") -> Obj:
        return {"items": list(self.c.pods.values())}

    def create_config_map(self, namespace: str, body: Obj) -> Obj:
        return self._add(self.c.config_maps, namespace, body)

    def delete_config_map(self, namespace: str, name: str) -> None:
        if self.c.config_maps.pop((namespace, name), None) is None:
            raise self._missing()

    def create_secret(self, namespace: str, body: Obj) -> Obj:
        return self._add(self.c.secrets, namespace, body)

    def read_secret(self, namespace: str, name: str) -> Obj:
        if (namespace, name) not in self.c.secrets:
            raise self._missing()
        return self.c.secrets[(namespace, name)]

    def delete_secret(self, namespace: str, name: str) -> None:
        if self.c.secrets.pop((namespace, name), None) is None:
            raise self._missing()

    def close(self) -> None:
        pass


class Cache:
    """The pod cache, as current as the stand-in's pods."""

    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def put(self, pod: Obj) -> None:
        pass

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.c.pods.get((namespace, name))

    def select(self, labels: dict[str, str]) -> list[Obj]:
        return [
            p
            for p in self.c.pods.values()
            if all(p["metadata"]["labels"].get(k) == v for k, v in labels.items())
        ]


def make(monkeypatch: pytest.MonkeyPatch, cluster: Cluster) -> KubernetesExecutor:
    monkeypatch.setattr(executor, "CoreApi", lambda _client: Api(cluster))
    monkeypatch.setattr(executor, "PodCache", lambda *args: Cache(cluster))
    return KubernetesExecutor(object(), KubernetesOptions())  # type: ignore[arg-type]


def request() -> LaunchRequest:
    spec = parse_submission(load_document(MPIJOB)).manifest.spec
    placements = (
        ReplicaPlacement("launcher", 0, 0, "node-0", (), 1000, 2**30),
        ReplicaPlacement("worker", 0, 1, "node-1", (0,), 1000, 2**30),
        ReplicaPlacement("worker", 1, 2, "node-2", (0,), 1000, 2**30),
    )
    return LaunchRequest("pi-abc", "pi", "t", 1, spec, placements, 29500)


def refs(launched: list[Any]) -> list[ReplicaRef]:
    tasks = ["launcher", "worker", "worker"]
    return [
        ReplicaRef("pi-abc", 1, tasks[r.rank], max(r.rank - 1, 0), r.rank, r.handle)
        for r in launched
    ]


NS = "kiban-t"
LAUNCHER, WORKERS = "kb-pi-abc-1-0", ("kb-pi-abc-1-1", "kb-pi-abc-1-2")


def test_the_launcher_is_made_only_once_every_worker_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster()
    kube = make(monkeypatch, cluster)
    launcher, *_ = refs(kube.launch(request()))
    assert sorted(name for _, name in cluster.pods) == list(WORKERS)
    assert set(cluster.config_maps) == {(NS, "kb-pi-abc-1-config")}
    hostfile = cluster.config_maps[(NS, "kb-pi-abc-1-config")]["data"]["hostfile"]
    assert hostfile.splitlines() == [
        f"{w}.kb-pi-abc-1.{NS}.svc.cluster.local slots=1" for w in WORKERS
    ]
    secret = cluster.secrets[(NS, "kb-pi-abc-1-ssh")]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-kb-pi-abc-1"
    seen = kube.observe(launcher)
    assert (seen.running, seen.message) == (True, "waiting for its workers to run")
    cluster.run(WORKERS[0])
    assert kube.observe(launcher).message == "waiting for its workers to run"
    assert (NS, LAUNCHER) not in cluster.pods
    cluster.run(*WORKERS)
    assert kube.observe(launcher).running
    pod = cluster.pods[(NS, LAUNCHER)]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert pod["metadata"]["ownerReferences"][0]["name"] == "kb-pi-abc-1"
    assert mpi_objects.LAUNCHER_POD_KEY not in str(pod)
    roles = {  # the MPI Operator's labels, so its users' selectors find the pods
        name: (
            pod["metadata"]["labels"]["training.kubeflow.org/job-role"],
            pod["metadata"]["labels"]["training.kubeflow.org/replica-index"],
            pod["metadata"]["labels"]["training.kubeflow.org/job-name"],
        )
        for (_, name), pod in cluster.pods.items()
    }
    assert roles == {
        LAUNCHER: ("launcher", "0", "pi"),
        WORKERS[0]: ("worker", "0", "pi"),
        WORKERS[1]: ("worker", "1", "pi"),
    }


def test_a_restarted_kiban_makes_the_launcher_from_the_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster()
    launcher, *_ = refs(make(monkeypatch, cluster).launch(request()))
    restarted = make(monkeypatch, cluster)  # nothing in memory: the handle and the cluster
    assert restarted.observe(launcher).message == "waiting for its workers to run"
    cluster.run(*WORKERS)
    assert restarted.observe(launcher).running
    assert cluster.pods[(NS, LAUNCHER)]["spec"]["containers"][0]["command"][0] == "mpirun"


def test_a_launcher_stopped_before_its_workers_ran_is_never_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster()
    kube = make(monkeypatch, cluster)
    launcher, *_ = refs(kube.launch(request()))
    kube.stop(launcher, force=False)
    cluster.run(*WORKERS)
    seen = kube.observe(launcher)
    assert (seen.running, seen.lost) == (False, True)
    assert (NS, LAUNCHER) not in cluster.pods


def test_a_launcher_whose_pod_is_deleted_is_lost_not_made_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster()
    kube = make(monkeypatch, cluster)
    launcher, *_ = refs(kube.launch(request()))
    cluster.run(*WORKERS)
    assert kube.observe(launcher).running
    del cluster.pods[(NS, LAUNCHER)]  # deleted behind kiban's back (its node gone)
    seen = kube.observe(launcher)
    assert (seen.running, seen.lost) == (False, True)
    assert (NS, LAUNCHER) not in cluster.pods


def test_the_attempt_ending_deletes_its_config_map_and_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster()
    kube = make(monkeypatch, cluster)
    launcher, *workers = refs(kube.launch(request()))
    cluster.run(*WORKERS)
    kube.observe(launcher)
    for ref in (launcher, *workers):
        kube.stop(ref, force=True)
    assert not cluster.pods and not cluster.services
    assert not cluster.config_maps and not cluster.secrets


def test_an_abandoned_attempt_of_an_earlier_kiban_loses_its_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster()
    make(monkeypatch, cluster).launch(request())
    make(monkeypatch, cluster).abandon("pi-abc", 1)  # found by its workers' key mounts
    assert not cluster.pods and not cluster.config_maps and not cluster.secrets
