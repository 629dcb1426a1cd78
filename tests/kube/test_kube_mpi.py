"""MPI jobs on the real control plane, submitted unchanged: an MPI Operator MPIJob and a
Volcano Job with the mpi and ssh plugins. Their pods are made as the Operator makes them: a
hostfile ConfigMap, an ssh key pair in a Secret owned by the attempt's Service, workers named
through the headless Service, the launcher created only once every worker is Running; the
launcher completing (KWOK's sim-duration stage) ends the job and its objects."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from kube_platform import NAMESPACE, empty_the_cluster, env_of, job_pods, kube_platform, submit
from kube_platform import state as job_state
from kube_support import eventually

from kiban.devtools.kube import ControlPlane
from kiban.domain.manifests import load_document
from kiban.platform import Platform

pytestmark = pytest.mark.kube

MPIJOB = """
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: allreduce
spec:
  slotsPerWorker: 2
  sshAuthMountPath: /home/mpiuser/.ssh
  runPolicy: {cleanPodPolicy: Running}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        metadata:
          annotations: {kiban.dev/sim-duration: 4s}
        spec:
          containers:
            - image: registry.example/mpi:1
              name: launcher
              command: [mpirun, -n, "4", python3, /opt/allreduce.py]
              resources:
                limits: {cpu: 1, memory: 1Gi}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - image: registry.example/mpi:1
              name: worker
              command: [/usr/sbin/sshd, -De]
              resources:
                limits: {nvidia.com/gpu: 2}
"""

VOLCANO_MPI = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: nccl-tests
spec:
  minAvailable: 3
  schedulerName: volcano
  plugins:
    ssh: []
    svc: []
    mpi: ["--master=mpimaster", "--worker=mpiworker", "--port=22"]
  tasks:
    - replicas: 2
      name: mpiworker
      template:
        spec:
          containers:
            - command: [/bin/sh, -c, "mkdir -p /var/run/sshd; /usr/sbin/sshd -D"]
              image: registry.example/nccl-tests:1
              name: mpiworker
              resources:
                limits: {nvidia.com/gpu: 1}
    - replicas: 1
      name: mpimaster
      policies:
        - {event: TaskCompleted, action: CompleteJob}
      template:
        metadata:
          annotations: {kiban.dev/sim-duration: 4s}
        spec:
          containers:
            - command: [/bin/sh, -c, "mpirun --host ${MPI_HOST} -np 2 all_reduce_perf"]
              image: registry.example/nccl-tests:1
              name: mpimaster
"""


class PodEvents:
    """The pod watch events of the tenant's namespace, in the API server's order."""

    def __init__(self, core: Any) -> None:
        from kubernetes import watch

        self.seen: list[tuple[str, str, str | None]] = []  # (type, pod, phase)
        self._stopped = False
        self._watch = watch.Watch()
        self._core = core
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._watch.stream(
                self._core.list_namespaced_pod, NAMESPACE, timeout_seconds=60
            ):
                pod = event.get("object")
                if pod is not None and hasattr(pod, "metadata"):
                    self.seen.append((event["type"], pod.metadata.name, pod.status.phase))
        except Exception:
            if not self._stopped:  # after stop, the stream may end any way it likes
                raise

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()

    def first(self, name: str, phase: str | None = None) -> int:
        """The index of the first event of pod ``name`` (in ``phase``)."""
        for index, (_, pod, seen_phase) in enumerate(self.seen):
            if pod == name and (phase is None or seen_phase == phase):
                return index
        raise AssertionError(f"no event of {name} in {phase}: {self.seen}")


@pytest.fixture
def platform(control_plane: ControlPlane, core: Any, tmp_path: Path) -> Iterator[Platform]:
    empty_the_cluster(core)
    with kube_platform(control_plane, tmp_path / "home") as built:
        yield built
    empty_the_cluster(core)


def run_mpi_job(
    platform: Platform, core: Any, document: dict[str, Any]
) -> tuple[str, list[Any], Any, Any, Any, PodEvents]:
    """Submit, wait for the launcher's pod; the job id, the pods by rank (the launcher's
    first), the ConfigMap, the Secret and the attempt's Service as they are then, and the
    pod events seen so far (the watch goes on)."""
    pod_events = PodEvents(core)
    job_id = submit(platform, document)
    pods: list[Any] = eventually(
        lambda: (p := job_pods(core, job_id)) and len(p) == 3 and p,
        what="the launcher's pod beside its two workers",
    )
    service = pods[1].spec.subdomain
    config = core.read_namespaced_config_map(f"{service}-config", NAMESPACE)
    secret = core.read_namespaced_secret(f"{service}-ssh", NAMESPACE)
    owner = core.read_namespaced_service(service, NAMESPACE)
    return job_id, pods, config, secret, owner, pod_events


def check_common(
    platform: Platform,
    core: Any,
    run: tuple[str, list[Any], Any, Any, Any, PodEvents],
    *,
    slots: str,
    ssh_path: str,
) -> None:
    """What every MPI job's attempt has, and how it ends."""
    job_id, pods, config, secret, service, pod_events = run
    launcher, workers = pods[0], pods[1:]
    hosts = [
        f"{w.metadata.name}.{service.metadata.name}.{NAMESPACE}.svc.cluster.local" for w in workers
    ]
    assert config.data["hostfile"] == "".join(f"{h} {slots}\n" for h in hosts)
    # the key pair: a private key whose public half is what the workers authorize
    assert secret.type == "kubernetes.io/ssh-auth"
    private = serialization.load_ssh_private_key(
        base64.b64decode(secret.data["ssh-privatekey"]), password=None
    )
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert base64.b64decode(secret.data["ssh-publickey"]).strip() == public
    for owned in (config, secret):
        (owner,) = owned.metadata.owner_references
        assert (owner.kind, owner.uid) == ("Service", service.metadata.uid)
    # every pod has the keys; the launcher the hostfile and the implementation's variables
    for pod in pods:
        mounts = {m.name: m.mount_path for m in pod.spec.containers[0].volume_mounts}
        volumes = {v.name: v for v in pod.spec.volumes}
        assert mounts["ssh-auth"] == ssh_path
        items = {i.path: i.key for i in volumes["ssh-auth"].secret.items}
        assert items["authorized_keys"] == items["id_rsa.pub"] == "ssh-publickey"
        assert volumes["ssh-auth"].secret.secret_name == secret.metadata.name
    assert "mpi-job-config" not in {v.name for v in workers[0].spec.volumes}
    mounts = {m.name: m.mount_path for m in launcher.spec.containers[0].volume_mounts}
    assert mounts["mpi-job-config"] == "/etc/mpi"
    env = env_of(launcher)
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["MPI_HOST"] == ",".join(hosts)
    # the launcher was created only after every worker ran
    eventually(lambda: job_state(platform, job_id) == "Succeeded", what="success", timeout=40)
    pod_events.stop()
    created = pod_events.first(launcher.metadata.name)
    for worker in workers:
        assert pod_events.first(worker.metadata.name, "Running") < created, pod_events.seen
    # the launcher's end ended the job: the workers (sshd, never ending) and the objects go
    eventually(lambda: not job_pods(core, job_id), what="the workers deleted")
    eventually(
        lambda: (
            not core.list_namespaced_config_map(
                NAMESPACE, field_selector=f"metadata.name={config.metadata.name}"
            ).items
            and not core.list_namespaced_secret(
                NAMESPACE, field_selector=f"metadata.name={secret.metadata.name}"
            ).items
        ),
        what="the ConfigMap and the Secret deleted with the attempt",
    )


def test_an_mpijob_runs_as_the_mpi_operator_makes_its_pods(platform: Platform, core: Any) -> None:
    run = run_mpi_job(platform, core, load_document(MPIJOB))
    pods = run[1]
    assert [p.metadata.labels["kiban.dev/task"] for p in pods] == ["launcher", "worker", "worker"]
    roles = [p.metadata.labels["training.kubeflow.org/job-role"] for p in pods]
    assert roles == ["launcher", "worker", "worker"]  # the Operator's selectors find them
    assert pods[0].spec.containers[0].command == [
        "mpirun",
        "-n",
        "4",
        "python3",
        "/opt/allreduce.py",
    ]
    assert pods[1].spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
    check_common(platform, core, run, slots="slots=2", ssh_path="/home/mpiuser/.ssh")


def test_a_volcano_mpi_and_ssh_job_runs_unchanged(platform: Platform, core: Any) -> None:
    run = run_mpi_job(platform, core, load_document(VOLCANO_MPI))
    pods = run[1]
    tasks = [p.metadata.labels["kiban.dev/task"] for p in pods]
    assert tasks == ["mpimaster", "mpiworker", "mpiworker"]
    # the svc plugin (the mpi plugin implies it): /etc/volcano/<task>.host in every pod from
    # the attempt's ConfigMap, and VC_<TASK>_HOSTS / VC_<TASK>_NUM
    service = run[4].metadata.name
    workers = [f"{p.metadata.name}.{service}.{NAMESPACE}.svc.cluster.local" for p in pods[1:]]
    master = f"{pods[0].metadata.name}.{service}.{NAMESPACE}.svc.cluster.local"
    hosts = core.read_namespaced_config_map(f"{service}-svc", NAMESPACE)
    assert hosts.data["mpiworker.host"] == "\n".join(workers)
    assert hosts.data["mpimaster.host"] == master
    for pod in pods:
        mounts = {m.name: m.mount_path for m in pod.spec.containers[0].volume_mounts}
        volumes = {v.name: v for v in pod.spec.volumes}
        assert mounts["volcano-hosts"] == "/etc/volcano"
        assert volumes["volcano-hosts"].config_map.name == f"{service}-svc"
        env = env_of(pod)
        assert env["VC_MPIWORKER_HOSTS"] == ",".join(workers)
        assert (env["VC_MPIWORKER_NUM"], env["VC_MPIMASTER_NUM"]) == ("2", "1")
        assert env["VC_MPIMASTER_HOSTS"] == master
    # kiban's default slots: the worker's GPUs
    check_common(platform, core, run, slots="slots=1", ssh_path="/root/.ssh")
    eventually(
        lambda: (
            not core.list_namespaced_config_map(
                NAMESPACE, field_selector=f"metadata.name={service}-svc"
            ).items
        ),
        what="the hosts ConfigMap deleted with the attempt",
    )


def test_a_launcher_deleted_while_kiban_is_down_is_made_again_on_restart(
    control_plane: ControlPlane, core: Any, tmp_path: Path
) -> None:
    """The launcher's body waits in the attempt's Secret: a kiban started again finds its
    launcher's pod gone (deleted meanwhile), makes it from the Secret, and the job completes."""
    empty_the_cluster(core)
    home = tmp_path / "home"
    document = load_document(MPIJOB)
    launcher = document["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    launcher["metadata"]["annotations"]["kiban.dev/sim-duration"] = "30s"  # outlives the restart
    with kube_platform(control_plane, home) as first:
        job_id = submit(first, document)
        pods: list[Any] = eventually(
            lambda: (p := job_pods(core, job_id)) and len(p) == 3 and p,
            what="the launcher's pod beside its two workers",
        )
    gone = pods[0]
    assert gone.metadata.labels["kiban.dev/task"] == "launcher"
    core.delete_namespaced_pod(gone.metadata.name, NAMESPACE, grace_period_seconds=0)
    eventually(
        lambda: all(p.metadata.uid != gone.metadata.uid for p in job_pods(core, job_id)),
        what="the launcher's pod deleted while kiban is down",
    )
    try:
        with kube_platform(control_plane, home) as second:
            again = eventually(
                lambda: next(
                    (
                        p
                        for p in job_pods(core, job_id)
                        if p.metadata.name == gone.metadata.name
                        and p.metadata.uid != gone.metadata.uid
                    ),
                    None,
                ),
                what="the launcher's pod made again from the Secret",
            )
            assert again.spec.containers[0].command == gone.spec.containers[0].command
            assert job_state(second, job_id) == "Running"
            assert [p.metadata.uid for p in job_pods(core, job_id)[1:]] == [
                p.metadata.uid for p in pods[1:]
            ]  # the workers kept
    finally:
        empty_the_cluster(core)
