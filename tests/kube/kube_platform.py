"""A kiban platform on the kube tier's control plane: the Kubernetes executor and the control
loop on a real clock, a store of its own, and helpers to read what it made in the cluster."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import select

from kiban import testing
from kiban.control.loop_settings import LoopSettings
from kiban.devtools.kube import ControlPlane
from kiban.executors.kubernetes import KubernetesExecutor, KubernetesOptions, connect
from kiban.executors.kubernetes.naming import MANAGED_SELECTOR, job_key
from kiban.platform import Platform, build_platform
from kiban.store.models import Event, Job
from kiban.store.models_nodes import Node
from kiban.testing.platform_jobs import submit_to_platform

OPTIONS = KubernetesOptions(default_image="registry.example/train:1", node_sync_s=0.2)
NAMESPACE = "kiban-default"  # the admin's jobs run for tenant "default"


@contextmanager
def kube_platform(plane: ControlPlane, home: Path) -> Iterator[Platform]:
    """build_platform with a Kubernetes executor; the loop runs until the block ends."""
    executor = KubernetesExecutor(connect(plane.kubeconfig), OPTIONS, log_dir=home / "pod-logs")
    settings = LoopSettings(tick_s=0.05, node_sync_s=OPTIONS.node_sync_s)
    platform = build_platform(home=home, db_url=None, executor=executor, loop_settings=settings)
    platform.loop.start()
    try:
        yield platform
    finally:
        platform.close()


def job_pods(core: Any, job_id: str, attempt: int | None = None) -> list[Any]:
    """The live pods of a job (of one attempt), by rank."""
    selector = f"{MANAGED_SELECTOR},kiban.dev/job={job_key(job_id)}"
    if attempt is not None:
        selector += f",kiban.dev/attempt={attempt}"
    pods = core.list_pod_for_all_namespaces(label_selector=selector).items
    return sorted(pods, key=lambda p: int(p.metadata.labels["kiban.dev/rank"]))


def empty_the_cluster(core: Any) -> None:
    """Remove every pod (the tier's other tests leave some holding GPUs) and kiban's Services,
    so that a test of the executor starts from an empty cluster."""
    for pod in core.list_pod_for_all_namespaces().items:
        core.delete_namespaced_pod(
            pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
        )
    for svc in core.list_service_for_all_namespaces(label_selector=MANAGED_SELECTOR).items:
        core.delete_namespaced_service(svc.metadata.name, svc.metadata.namespace)


def env_of(pod: Any, core: Any | None = None) -> dict[str, str]:
    """A pod's variables; with ``core``, those taken from a Secret read from it (the attempt's
    credentials are never values in the pod spec)."""
    env = {}
    for entry in pod.spec.containers[0].env or []:
        ref = entry.value_from.secret_key_ref if entry.value_from is not None else None
        if ref is not None and core is not None:
            secret = core.read_namespaced_secret(ref.name, pod.metadata.namespace)
            env[entry.name] = base64.b64decode(secret.data[ref.key]).decode()
        else:
            env[entry.name] = entry.value
    return env


def manifest(name: str, *, replicas: int = 1, gpu: int = 2, **spec: Any) -> dict[str, Any]:
    """kiban.testing's manifest sized for the tier's 2-GPU nodes (``annotations`` go on the
    pods: KWOK's sim-* ones)."""
    return testing.manifest(name, replicas=replicas, gpu=gpu, **spec)


def submit(platform: Platform, document: dict[str, Any]) -> str:
    """Store the job and wake the loop, which runs on its own thread here."""
    job_id = submit_to_platform(platform, document)
    platform.loop.wake()
    return job_id


def get(platform: Platform, job_id: str) -> Job:
    with platform.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


def state(platform: Platform, job_id: str) -> str:
    return get(platform, job_id).state


def events(platform: Platform, job_id: str) -> list[tuple[str, str]]:
    with platform.sessions() as session:
        query = select(Event).where(Event.object_kind == "Job", Event.object_name == job_id)
        return [(e.reason, e.message) for e in session.scalars(query.order_by(Event.id))]


def node_row(platform: Platform, name: str) -> Node:
    with platform.sessions() as session:
        row = session.get(Node, name)
        assert row is not None
        return row
