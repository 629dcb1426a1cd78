"""The MPI attempts a Kubernetes executor runs: their ConfigMaps and Secrets, and launchers
whose pods are made only once every worker runs.

``mpi_objects`` builds the objects; this keeps what the executor knows of them between calls:
the launcher bodies waiting to be made, the launchers stopped before they were made (never
made after), those made (gone now: lost, not made again), and the namespace of each attempt
that has MPI objects (deleted by name with it: kiban may not list Secrets). Its state has a
lock of its own, so none of it waits on the executor's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubernetes.client.exceptions import ApiException

from kiban.clock import Clock
from kiban.executors.base import LaunchRequest, Observation, ReplicaRef
from kiban.executors.kubernetes import mpi_objects
from kiban.executors.kubernetes.api import CoreApi, Obj, ignore_gone
from kiban.executors.kubernetes.naming import ATTEMPT_LABEL, JOB_LABEL, job_key, service_name
from kiban.executors.kubernetes.podcache import PodCache
from kiban.executors.kubernetes.pods import observe_pod

Launcher = tuple[str, str]  # (namespace, pod name)


class MpiLaunchers:
    """MPI attempts' objects and deferred launchers (see the module docstring)."""

    def __init__(
        self,
        api: CoreApi,
        pods: PodCache,
        clock: Clock,
        create_pod: Callable[[str, Obj], Obj],
        node_present: Callable[[Obj], bool],
    ) -> None:
        self._api = api
        self._pods = pods
        self._clock = clock
        self._create_pod = create_pod
        self._node_present = node_present
        self._lock = threading.Lock()
        self._bodies: dict[Launcher, Obj] = {}
        self._stopped: set[Launcher] = set()
        self._made: set[Launcher] = set()
        self._attempts: dict[tuple[str, int], str] = {}  # their namespaces

    def create_objects(
        self,
        request: LaunchRequest,
        namespace: str,
        mpi: mpi_objects.MpiAttempt | None,
        bodies: list[Obj],
    ) -> int | None:
        """An MPI attempt's ConfigMap and Secret (those of an earlier try of it are kept), the
        launcher's body kept to be created later when it has workers to wait for: its index."""
        if mpi is None:
            return None
        deferred = mpi.launcher if mpi.workers else None
        with self._lock:
            if deferred is not None:
                body = bodies[deferred]
                mpi.keep_launcher(body)
                self._bodies[(namespace, body["metadata"]["name"])] = body
            self._attempts[(request.job_id, request.attempt)] = namespace
        for create, body in (
            (self._api.create_config_map, mpi.config_map),
            (self._api.create_secret, mpi.secret),
        ):
            try:
                create(namespace, body)
            except ApiException as exc:
                if exc.status != 409:  # 409: made by an earlier try of this attempt
                    raise
        return deferred

    def observe(self, replica: ReplicaRef, namespace: str, name: str) -> Observation:
        """An MPI launcher: its pod once made; before, made now if every worker runs."""
        with self._lock:
            self._attempts[(replica.job_id, replica.attempt)] = namespace
            stopped = (namespace, name) in self._stopped
            made = (namespace, name) in self._made
        # the cache only (no read each pass while it waits): a pod it has not seen yet is found
        # by its creation's 409
        pod = self._pods.get(namespace, name)
        if pod is None and stopped:
            return Observation(running=False, lost=True, message="stopped before it started")
        if pod is None and made:
            return observe_pod(None)
        if pod is None:
            body = self._body(replica, namespace, name)
            if body is None:
                return Observation(
                    running=False,
                    lost=True,
                    message="its pod was never made: the attempt's MPI Secret is gone",
                )
            expected = int(body["metadata"]["annotations"][mpi_objects.WORKERS_ANNOTATION])
            selector = {JOB_LABEL: job_key(replica.job_id), ATTEMPT_LABEL: str(replica.attempt)}
            _, ready = mpi_objects.workers_running(
                self._pods.select(selector), replica.rank, expected
            )
            if not ready:
                return Observation(running=True, message="waiting for its workers to run")
            pod = self._create_pod(namespace, body)
            self._pods.put(pod)
            with self._lock:
                self._bodies.pop((namespace, name), None)
                self._made.add((namespace, name))
        return observe_pod(pod, node_present=self._node_present(pod), now=self._clock.now())

    def _body(self, replica: ReplicaRef, namespace: str, name: str) -> Obj | None:
        """The launcher's pod body: kept since launch, or read from the attempt's Secret (a
        restarted kiban); None when the Secret is gone."""
        with self._lock:
            body = self._bodies.get((namespace, name))
        if body is not None:
            return body
        secret = mpi_objects.secret_name(replica.job_id, replica.attempt)
        try:
            body = mpi_objects.launcher_body(self._api.read_secret(namespace, secret))
        except ApiException as exc:
            if exc.status != 404:
                raise
            return None
        if body is not None:
            with self._lock:
                self._bodies[(namespace, name)] = body
        return body

    def stop(self, namespace: str, name: str) -> None:
        """A launcher stopped: not to be made after this, whatever its workers do."""
        with self._lock:
            self._stopped.add((namespace, name))
            self._bodies.pop((namespace, name), None)

    def namespace_of(self, job_id: str, attempt: int) -> str | None:
        """The namespace of an attempt's MPI objects, when this executor knows of them."""
        with self._lock:
            return self._attempts.get((job_id, attempt))

    def delete_objects(self, job_id: str, attempt: int, namespace: str | None = None) -> None:
        """An MPI attempt's ConfigMap and Secret, in ``namespace`` (None: where they were made;
        for attempts without MPI objects known to this executor, no call is made)."""
        with self._lock:
            known = self._attempts.pop((job_id, attempt), None)
        namespace = namespace or known
        if namespace is None:
            return
        ignore_gone(
            self._api.delete_config_map, namespace, mpi_objects.config_map_name(job_id, attempt)
        )
        ignore_gone(self._api.delete_secret, namespace, mpi_objects.secret_name(job_id, attempt))
        prefix = f"{service_name(job_id, attempt)}-"  # its pods' names: the launcher's is one
        with self._lock:  # with its Secret gone, a launcher not made is lost, never made
            for key in [k for k in self._bodies if k[1].startswith(prefix)]:
                del self._bodies[key]
            for held in (self._stopped, self._made):
                held -= {k for k in held if k[1].startswith(prefix)}
