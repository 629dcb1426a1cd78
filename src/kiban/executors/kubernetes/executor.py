"""Runs kiban's jobs as pods on a Kubernetes cluster, through the official client.

For each attempt of an admitted job: the tenant's namespace (made if absent), a headless
Service (DNS names for the pods; ``MASTER_ADDR`` is replica 0's) unless the attempt has one
replica, and one pod per replica bound to the node kiban chose (see ``pods`` for why
``nodeName``). The Service owns the pods (owner references), and every object carries the job's
labels, so all of an attempt is found with one selector and deleted together (explicitly: kiban
does not count on a garbage collector). An MPI attempt (``launcher: mpirun``) also gets a
hostfile ConfigMap and an ssh key Secret, and its launcher's pod waits for its workers to run
(``mpi_objects`` builds them, ``mpi_launchers`` keeps track of them). The log of a pod that
ended is kept (``kept_logs``)
before the pod is deleted, in the background, and ``read_log`` serves it after (``pod_logs``
reads logs, live or kept); the log of a pod stopped while it runs is followed to its end and
kept (``stopping_logs``). Volcano's svc plugin's hosts ConfigMap is ``hosts_objects``'s; the
attempt's credentials (its API token, a notebook's Jupyter token) are in a Secret, ``env_secrets``.

Replicas are identified by a handle ``namespace/name/uid``; ``observe`` reads a pod cache that
a watch keeps current (``podcache``), so a restarted kiban finds the pods it started before
(Capability.ADOPT): running jobs keep their pods, and attempts cut short while launching are
deleted by their labels (``abandon``), so that no pod is duplicated or left behind.

It offers logs, an address per service revision (a Service) and closing; no CPU meter (pods'
CPU use is the metrics server's) and no checkpoint probe: a job's checkpoints are in storage
mounted in its containers, which kiban's control plane does not see (the control plane says
so once: ``checkpoint_detection_unavailable``).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from kiban.clock import Clock, SystemClock
from kiban.executors.base import (
    Capability,
    LaunchedReplica,
    LaunchError,
    LaunchRequest,
    NodeInfo,
    Observation,
    Offers,
    ReplicaRef,
)
from kiban.executors.kubernetes import env_secrets, hosts_objects, mpi_objects
from kiban.executors.kubernetes.api import CoreApi, Obj, connect, ignore_gone
from kiban.executors.kubernetes.kept_logs import KEPT_LOG_LINES, KeptLogs
from kiban.executors.kubernetes.mpi_launchers import MpiLaunchers
from kiban.executors.kubernetes.naming import (
    ATTEMPT_LABEL,
    JOB_ID_ANNOTATION,
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_SELECTOR,
    MANAGER,
    REVISION_LABEL,
    TENANT_LABEL,
    attempt_selector,
    job_key,
    make_handle,
    namespace_for,
    parse_handle,
    revision_service_name,
    service_name,
)
from kiban.executors.kubernetes.nodes import TERMINAL_PHASES, foreign_gpus, node_info
from kiban.executors.kubernetes.notebook_storage import KubeNotebookStorage
from kiban.executors.kubernetes.options import KubernetesOptions
from kiban.executors.kubernetes.pod_logs import PodLogs, ended
from kiban.executors.kubernetes.podcache import PodCache
from kiban.executors.kubernetes.pods import (
    CONTAINER,
    needs_no_service,
    observe_pod,
    owner_reference,
    pod_manifest,
    revision_service_manifest,
    service_manifest,
)
from kiban.executors.kubernetes.stopping_logs import StoppingPodLogs, attempt_and_rank
from kiban.executors.log_streams import (
    Mark,
)

log = logging.getLogger("kiban.executors.kubernetes")

FORCE_GRACE_S = 1  # "now": the kubelet kills at once, and still confirms the containers stopped
LAUNCH_WORKERS = 8  # pods of one launch created at once (see api.POOL: connections for them)
LIVE_PODS_ON_NODES = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
# Only other pods' GPUs are subtracted: listing kiban's own (thousands) every node sync cost
# kiban 0.34 s of CPU per sync with 1,000 of them running, 0.14 s without (kiban bench kube).
NOT_MANAGED_SELECTOR = f"{MANAGED_BY}!={MANAGER}"
# The Services of inference-service revisions (an attempt's headless Service has no revision).
REVISION_SERVICES_SELECTOR = f"{MANAGED_SELECTOR},{REVISION_LABEL}"


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


def _logged(task: Callable[..., None], *args: Any) -> None:
    """Run a background task; its failure is logged (a pool would keep it unseen)."""
    try:
        task(*args)
    except Exception:
        log.exception("%s failed", getattr(task, "__name__", task))


class KubernetesExecutor:
    """The executor of a Kubernetes cluster (see the module docstring)."""

    name = "kubernetes"
    capabilities = frozenset(
        {Capability.ADOPT, Capability.CONTAINERS, Capability.TORCHRUN, Capability.MPI}
    )
    launch_concurrency = LAUNCH_WORKERS  # each launch waits on API round trips: overlap them

    def __init__(
        self,
        api_client: ApiClient,
        options: KubernetesOptions | None = None,
        clock: Clock | None = None,
        log_dir: Path | None = None,
    ) -> None:
        """``log_dir``: where the logs of pods that ended are kept once the pods are deleted
        (None: not kept; ``kiban logs`` then shows nothing of a finished job)."""
        self.options = options or KubernetesOptions()
        self.node_sync_s = self.options.node_sync_s
        self.api = CoreApi(api_client)
        self._clock = clock or SystemClock()
        self._namespaces: set[str] = set()
        self._node_names: set[str] | None = None  # from the last nodes(); None: not listed yet
        self._lock = threading.Lock()
        self._random = random.Random()
        self._creators: ThreadPoolExecutor | None = None  # made by the first multi-pod launch
        self.kept = KeptLogs(log_dir) if log_dir is not None else None
        self._keeper: ThreadPoolExecutor | None = None  # keeps logs, then deletes (one thread)
        self.stopping = StoppingPodLogs(self.api, self.kept) if self.kept is not None else None
        self.pods = PodCache(self.api, MANAGED_SELECTOR)
        self.pods.start()
        self.logs = PodLogs(self.api, self.pods, self.kept)
        self.mpi = MpiLaunchers(
            self.api, self.pods, self._clock, self._create_pod, self._node_present
        )
        self.offers = Offers(
            logs=self,
            revisions=self,
            closing=self,
            taints=self,
            notebooks=KubeNotebookStorage(self.api, self.options),
        )

    @classmethod
    def connect(
        cls,
        kubeconfig: Path | None,
        options: KubernetesOptions | None = None,
        log_dir: Path | None = None,
    ) -> KubernetesExecutor:
        """Connect with a kubeconfig file, or in-cluster when None."""
        return cls(connect(kubeconfig), options, log_dir=log_dir)

    def close(self) -> None:
        """Finish keeping logs (and the deletions behind them), stop the pod watch and the pod
        creators; close the connections."""
        if self._keeper is not None:
            self._keeper.shutdown(wait=True)
        if self.stopping is not None:
            self.stopping.close()
        self.pods.stop()
        if self._creators is not None:
            self._creators.shutdown()
        self.api.close()

    # -- nodes -----------------------------------------------------------------------------
    def taint_node(self, node: str, key: str, value: str, effect: str) -> None:
        """Put a taint on the Node (``NodeTaints``): its taints read, this one added or its value
        set, written back with the Node's resourceVersion so a concurrent change is not lost."""
        current = self.api.read_node(node)
        spec = current.get("spec") or {}
        taints = [
            t for t in spec.get("taints") or [] if (t.get("key"), t.get("effect")) != (key, effect)
        ]
        taints.append({"key": key, "value": value, "effect": effect})
        version = (current.get("metadata") or {}).get("resourceVersion")
        body = {"metadata": {"resourceVersion": version}, "spec": {"taints": taints}}
        self.api.patch_node(node, body)

    def nodes(self) -> list[NodeInfo]:
        """The cluster's nodes (those matching ``options.node_selector``), GPUs of others off."""
        nodes = self.api.list_nodes(self.options.node_selector)
        live = self.api.list_pods(
            label_selector=NOT_MANAGED_SELECTOR, field_selector=LIVE_PODS_ON_NODES
        )
        elsewhere = foreign_gpus(live.get("items") or [])
        infos = [node_info(n, self.options, elsewhere.get(n["metadata"]["name"], 0)) for n in nodes]
        with self._lock:
            self._node_names = {n.name for n in infos}
        return sorted(infos, key=lambda n: n.name)

    def pick_master_port(self) -> int:
        """A port from a small range above ``options.master_port``.

        Each pod has its own network, so one port would do, except for pods on the host's
        network (``hostNetwork``), where two jobs' replica 0 may share a node.
        """
        return self.options.master_port + self._random.randrange(500)

    # -- launch ----------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> list[LaunchedReplica]:
        """Namespace, Service, then one pod per placement; on failure, delete what was made."""
        try:
            namespace = namespace_for(self.options.namespace_prefix, request.tenant)
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
        # Build every manifest first: a bad spec fails before anything is created.
        bodies = [pod_manifest(request, p, namespace, self.options) for p in request.placements]
        alone = needs_no_service(request)
        mpi = mpi_objects.prepare(request, bodies, namespace, self.options.cluster_domain, alone)
        hosts = hosts_objects.prepare(
            request, bodies, namespace, self.options.cluster_domain, alone
        )
        credentials = env_secrets.prepare(request, bodies, namespace)
        try:
            self._ensure_namespace(namespace)
            if not alone:
                owner = owner_reference(
                    request.job_id, request.attempt, self._ensure_service(request, namespace)
                )
                for body in bodies:
                    body["metadata"]["ownerReferences"] = [owner]
                if mpi is not None:
                    mpi.with_owner(owner)
                for made in (hosts, credentials):
                    if made is not None:
                        made["metadata"]["ownerReferences"] = [owner]
            if hosts is not None:
                hosts_objects.create(self.api, namespace, hosts)
            if credentials is not None:
                env_secrets.create(self.api, namespace, credentials)
            deferred = self.mpi.create_objects(request, namespace, mpi, bodies)
            created = iter(
                self._create_pods(namespace, [b for i, b in enumerate(bodies) if i != deferred])
            )
            launched = []
            for index, placement in enumerate(request.placements):
                if index == deferred:  # its pod is made once the workers run (observe)
                    name = bodies[index]["metadata"]["name"]
                    handle = make_handle(namespace, name, mpi_objects.DEFERRED_UID)
                    launched.append(LaunchedReplica(placement.rank, self._clock.now(), handle))
                    continue
                pod = next(created)
                self.pods.put(pod)
                meta = pod["metadata"]
                handle = make_handle(namespace, meta["name"], meta["uid"])
                launched.append(LaunchedReplica(placement.rank, self._clock.now(), handle))
        except ApiException as exc:
            self.abandon(request.job_id, request.attempt)
            if credentials is not None:  # no pod may refer to it, so abandon may not find it
                name = env_secrets.secret_name(request.job_id, request.attempt)
                ignore_gone(self.api.delete_secret, namespace, name)
            raise LaunchError(f"the Kubernetes API refused: {_api_message(exc)}") from None
        return launched

    def _ensure_namespace(self, namespace: str) -> None:
        if namespace in self._namespaces:
            return
        body: Obj = {"metadata": {"name": namespace, "labels": {MANAGED_BY: MANAGER}}}
        try:
            self.api.create_namespace(body)
        except ApiException as exc:
            if exc.status != 409:  # 409: it exists already
                raise
        self._namespaces.add(namespace)

    def _ensure_service(self, request: LaunchRequest, namespace: str) -> str:
        """The attempt's headless Service (made now, or found from an earlier try): its uid."""
        body = service_manifest(request, namespace)
        try:
            service = self.api.create_service(namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            service = self.api.read_service(namespace, body["metadata"]["name"])
        return str(service["metadata"]["uid"])

    def _create_pods(self, namespace: str, bodies: list[Obj]) -> list[Obj]:
        """Create the pods of one launch, up to ``LAUNCH_WORKERS`` requests at once (a gang's
        pods one by one would wait a round trip each); in order. After a failure the requests
        not yet sent are dropped, and those in flight end before this raises, so that
        ``abandon`` finds all that was made."""
        if len(bodies) == 1:
            return [self._create_pod(namespace, bodies[0])]
        with self._lock:
            if self._creators is None:
                self._creators = ThreadPoolExecutor(LAUNCH_WORKERS, "kiban-pod-create")
            creators = self._creators
        futures = [creators.submit(self._create_pod, namespace, body) for body in bodies]
        if wait(futures, return_when=FIRST_EXCEPTION).not_done:
            for future in futures:
                future.cancel()
            wait(futures)
        for future in futures:
            error = None if future.cancelled() else future.exception()
            if error is not None:
                raise error
        return [future.result() for future in futures]

    def _create_pod(self, namespace: str, body: Obj) -> Obj:
        """Create the pod; one of the same attempt that exists already is taken as it is."""
        try:
            return self.api.create_pod(namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            return self.api.read_pod(namespace, body["metadata"]["name"])

    # -- observe and stop --------------------------------------------------------------------
    def _pod(self, ref: ReplicaRef) -> tuple[str, str, str, Obj | None] | None:
        """(namespace, name, uid, the pod if it is still that one), or None without a handle."""
        if ref.handle is None:
            return None
        namespace, name, uid = parse_handle(ref.handle)
        pod = self.pods.get(namespace, name)
        if pod is None:
            pod = self._read(namespace, name)  # not in the cache yet, or gone: ask
        if uid == mpi_objects.DEFERRED_UID:  # an MPI launcher: its pod, whenever it was made
            return namespace, name, pod["metadata"]["uid"] if pod else uid, pod
        if pod is not None and pod["metadata"].get("uid") != uid:
            pod = None  # another pod of the same name: ours is gone
        return namespace, name, uid, pod

    def _read(self, namespace: str, name: str) -> Obj | None:
        try:
            return self.api.read_pod(namespace, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def observe(self, replica: ReplicaRef) -> Observation:
        if replica.handle is not None and mpi_objects.is_deferred(replica.handle):
            namespace, name, _ = parse_handle(replica.handle)
            return self.mpi.observe(replica, namespace, name)
        found = self._pod(replica)
        if found is None:
            return Observation(running=False, lost=True, message="no pod was recorded for it")
        pod = found[3]
        return observe_pod(
            pod, node_present=pod is None or self._node_present(pod), now=self._clock.now()
        )

    def replica_address(self, replica: ReplicaRef, port: int) -> str | None:
        """The pod's IP once the cluster gave it one (simulated nodes' pods have theirs too,
        though nothing listens there)."""
        found = self._pod(replica)
        pod = None if found is None else found[3]
        ip = None if pod is None else (pod.get("status") or {}).get("podIP")
        return f"{ip}:{port}" if ip else None

    def publish_revision(self, tenant: str, service: str, revision: str, port: int) -> str:
        """Make (or keep) the Service of one revision of an inference service; its address."""
        namespace = namespace_for(self.options.namespace_prefix, tenant)
        self._ensure_namespace(namespace)
        body = revision_service_manifest(namespace, tenant, service, revision, port)
        try:
            self.api.create_service(namespace, body)
        except ApiException as exc:
            if exc.status != 409:  # 409: made by an earlier pass
                raise
        return self._revision_address(body["metadata"]["name"], namespace)

    def unpublish_revision(self, tenant: str, revision: str) -> None:
        """Delete a revision's Service (gone already is fine)."""
        namespace = namespace_for(self.options.namespace_prefix, tenant)
        ignore_gone(self.api.delete_service, namespace, revision_service_name(revision))

    def published_revisions(self) -> dict[tuple[str, str], str]:
        """The revision Services kiban made that exist now, by (tenant, revision): their
        addresses. One list call over every namespace, so that a restarted control plane can
        remove those it no longer remembers making (their revisions took traffic before it
        stopped). A Service's tenant is its label; one made before Services carried it is read
        from its namespace (``prefix`` + tenant), and one in a namespace of another prefix is
        left out (kiban could not delete it by tenant)."""
        found: dict[tuple[str, str], str] = {}
        prefix = self.options.namespace_prefix
        for service in self.api.list_services(REVISION_SERVICES_SELECTOR):
            meta = service["metadata"]
            labels = meta.get("labels") or {}
            namespace = meta["namespace"]
            tenant = labels.get(TENANT_LABEL)
            if tenant is None and namespace.startswith(prefix):
                tenant = namespace.removeprefix(prefix)
            if not tenant or f"{prefix}{tenant}" != namespace:
                log.warning(
                    "revision Service %s/%s left alone: its namespace is no tenant's under %r",
                    namespace,
                    meta["name"],
                    prefix,
                )
                continue
            found[(tenant, labels[REVISION_LABEL])] = self._revision_address(
                meta["name"], namespace
            )
        return found

    def _revision_address(self, name: str, namespace: str) -> str:
        return f"{name}.{namespace}.svc.{self.options.cluster_domain}:80"

    def _node_present(self, pod: Obj) -> bool:
        """Whether the pod's node was in the last node list (True before any list)."""
        node = (pod.get("spec") or {}).get("nodeName")
        with self._lock:
            names = self._node_names
        return names is None or node is None or node in names

    def stop(self, replica: ReplicaRef, *, force: bool) -> None:
        """Delete the replica's pod: with the job's grace period, or at once with ``force``.

        The grace period is the pod's own (``terminationGracePeriodSeconds``, the job's). With
        ``force`` on replica 0 the attempt's Service goes too: a forced stop ends an attempt. A
        pod whose node is gone is removed at once (no kubelet is left to confirm its end), as
        the pod garbage collector of a cluster would.
        """
        found = self._pod(replica)
        if found is None:
            return
        namespace, name, uid, pod = found
        if replica.handle is not None and mpi_objects.is_deferred(replica.handle):
            self.mpi.stop(namespace, name)
        if pod is not None and not force:
            phase = (pod.get("status") or {}).get("phase")
            if phase in TERMINAL_PHASES or pod["metadata"].get("deletionTimestamp"):
                return  # nothing left to ask
        if pod is not None:
            present = self._node_present(pod)
            grace = (FORCE_GRACE_S if force else None) if present else 0
            if force and self.kept is not None and ended(pod):
                # its log goes with it: keep that first, off the control loop's thread (a
                # pod that ended holds nothing, so it may go a moment later)
                self._in_background(self._keep_then_delete, replica, pod, grace)
            else:
                ignore_gone(self.api.delete_pod, namespace, name, uid=uid, grace_s=grace)
                if self.stopping is not None and present and not ended(pod):
                    self.stopping.follow(replica.job_id, pod, grace)
        if force and replica.rank == 0:
            service = service_name(replica.job_id, replica.attempt)
            if self.kept is not None:
                # after the logs of every replica that ended: the Service owns their pods, and
                # a cluster's garbage collector deletes them with it
                self._in_background(self._end_attempt, replica, namespace, service)
            else:
                ignore_gone(self.api.delete_service, namespace, service)
                credentials = env_secrets.secret_name(replica.job_id, replica.attempt)
                ignore_gone(self.api.delete_secret, namespace, credentials)
                self.mpi.delete_objects(replica.job_id, replica.attempt)

    def _in_background(self, task: Callable[..., None], *args: Any) -> None:
        if self._keeper is None:
            self._keeper = ThreadPoolExecutor(1, thread_name_prefix="kiban-kube-logs")
        self._keeper.submit(_logged, task, *args)

    def _keep_then_delete(self, replica: ReplicaRef, pod: Obj, grace: int | None) -> None:
        self._keep(replica.job_id, pod)
        meta = pod["metadata"]
        ignore_gone(
            self.api.delete_pod, meta["namespace"], meta["name"], uid=meta["uid"], grace_s=grace
        )

    def _end_attempt(self, replica: ReplicaRef, namespace: str, service: str) -> None:
        selector = {JOB_LABEL: job_key(replica.job_id), ATTEMPT_LABEL: str(replica.attempt)}
        hosts = False
        for pod in self.pods.select(selector):
            hosts = hosts or hosts_objects.has_hosts(pod)
            if ended(pod):
                self._keep(replica.job_id, pod)
        ignore_gone(self.api.delete_service, namespace, service)
        if hosts:
            name = hosts_objects.config_map_name(replica.job_id, replica.attempt)
            ignore_gone(self.api.delete_config_map, namespace, name)
        # by name, whatever the pods said: they may be gone from the cache by now (a Secret
        # the attempt never had is a 404, ignored)
        credentials = env_secrets.secret_name(replica.job_id, replica.attempt)
        ignore_gone(self.api.delete_secret, namespace, credentials)
        self.mpi.delete_objects(replica.job_id, replica.attempt)

    def _keep(self, job_id: str, pod: Obj) -> None:
        """Keep the log of a pod that ended (once; nothing when its node serves no log)."""
        assert self.kept is not None
        meta = pod["metadata"]
        attempt, rank = attempt_and_rank(pod)
        if self.kept.has(job_id, attempt, rank):
            return
        try:
            data = self.api.read_pod_log(
                meta["namespace"], meta["name"], CONTAINER, tail_lines=KEPT_LOG_LINES
            )
        except Exception as exc:  # gone already, or the node serves no logs (a fake node)
            log.debug("no log kept of %s/%s: %s", meta["namespace"], meta["name"], exc)
            return
        self.kept.keep(job_id, attempt, rank, data)

    def abandon(self, job_id: str, attempt: int) -> None:
        """Delete every pod and the Service of one attempt, found by their labels (the logs of
        pods that ended kept first), and the attempt's ConfigMaps and Secrets (MPI's, the hosts',
        the credentials') by name in the namespace of the pods that use them (none is listed:
        kiban may not list Secrets)."""
        selector = attempt_selector(job_id, attempt)
        namespaces, hosts, secrets = set(), set(), set()
        for pod in self.api.list_pods(label_selector=selector).get("items") or []:
            meta = pod["metadata"]
            if mpi_objects.is_mpi_pod(pod):
                namespaces.add(meta["namespace"])
            if hosts_objects.has_hosts(pod):
                hosts.add(meta["namespace"])
            if env_secrets.refers_to_secret(pod):
                secrets.add(meta["namespace"])
            if self.kept is not None and ended(pod):
                self._keep(job_id, pod)
            present = self._node_present(pod)
            grace = FORCE_GRACE_S if present else 0
            ignore_gone(self.api.delete_pod, meta["namespace"], meta["name"], grace_s=grace)
            if self.stopping is not None and present and not ended(pod):
                self.stopping.follow(job_id, pod, grace)
        for service in self.api.list_services(selector):
            meta = service["metadata"]
            ignore_gone(self.api.delete_service, meta["namespace"], meta["name"])
        for namespace in sorted(hosts):
            name = hosts_objects.config_map_name(job_id, attempt)
            ignore_gone(self.api.delete_config_map, namespace, name)
        for namespace in sorted(secrets):
            credentials = env_secrets.secret_name(job_id, attempt)
            ignore_gone(self.api.delete_secret, namespace, credentials)
        known = self.mpi.namespace_of(job_id, attempt)
        for namespace in sorted(namespaces | ({known} if known else set())):
            self.mpi.delete_objects(job_id, attempt, namespace)  # or made before a restart

    def attempts(self) -> set[tuple[str, int]]:
        """The attempts of kiban's pods in kiban's namespaces, by their job id annotation."""
        found = set()
        prefix = self.options.namespace_prefix
        for pod in self.api.list_pods(label_selector=MANAGED_SELECTOR).get("items") or []:
            meta = pod["metadata"]
            job_id = (meta.get("annotations") or {}).get(JOB_ID_ANNOTATION)
            attempt = (meta.get("labels") or {}).get(ATTEMPT_LABEL, "")
            if job_id and attempt.isdigit() and meta["namespace"].startswith(prefix):
                found.add((job_id, int(attempt)))
        return found

    # -- logs (``pod_logs``) -------------------------------------------------------------
    def read_log(self, job_id: str, rank: int, offset: int, limit: int) -> tuple[bytes, int]:
        return self.logs.read_log(job_id, rank, offset, limit)

    def log_start(
        self, job_id: str, rank: int, *, tail_lines: int | None, since: float | None
    ) -> int | None:
        return self.logs.log_start(job_id, rank, tail_lines=tail_lines, since=since)

    def log_times(self, job_id: str, rank: int, start: int, end: int) -> list[Mark] | None:
        return self.logs.log_times(job_id, rank, start, end)

    def follow_log(self, job_id: str, rank: int, offset: int) -> Iterator[bytes] | None:
        return self.logs.follow_log(job_id, rank, offset)
