"""The service controller: keeps each inference service's replicas, readiness and routes true.

Every pass, for each service:

1. Account for replica jobs that ended: a replica that never became ready counts as a crash;
   one whose model failed to load (its log's ``KIBAN_LOAD_FAILED:`` line), or a third crash,
   marks the revision Failed with that message, and traffic stays where it was.
2. Probe the running replicas' readiness paths; a revision with a ready replica is Ready, and
   a canary at 100% that is Ready becomes the stable revision.
3. Decide each live revision's replica count (the autoscaler, from the router's traffic, or
   for ``scaleMetric: cpu`` from the ready replicas' CPU use, read from the executor).
4. Create or cancel replica jobs to match: the scheduler places them like any job, under the
   tenant's queue quota and the serving priority class.
5. Publish the routes (traffic split and ready endpoints) to the router.

A deleted service's replicas are cancelled, and the service removed once none is left.

On executors that give a revision its own address (a Kubernetes Service), each revision that
takes traffic gets one, and after every pass each one made for a revision that takes no
traffic, of any service in the store or of none, is removed (``revision_services``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from kiban.clock import Clock, SystemClock
from kiban.control.revision_services import RevisionServices
from kiban.control.settling import replica_ref
from kiban.domain.rollout import (
    RevisionState,
    TrafficTargets,
    revision_name,
    serving_revisions,
    traffic_split,
)
from kiban.domain.service import ServiceSpec
from kiban.domain.service_replica import replica_job_manifest, replica_port
from kiban.domain.states import JobState
from kiban.executors.base import Capability, Executor, cannot_start
from kiban.services import jobs
from kiban.services.auth import Principal
from kiban.services.errors import ServiceError
from kiban.services.jobs import ID_RENEWALS, ClusterFacts
from kiban.services.policy import current_policy
from kiban.services.serving import (
    promote_canary,
    revisions_of,
    service_event,
    serving_priority_class,
    stored_spec,
)
from kiban.serving.autoscaler import ScaleDecision, ScalerState, decide
from kiban.serving.capacity import replica_concurrency, scaling_policy
from kiban.serving.cpu_use import CpuMeter, CpuSample
from kiban.serving.router.table import Endpoint, Route, RoutingTable
from kiban.serving.router.traffic import TrafficMetrics
from kiban.serving.router.upstream import UNIX_PREFIX
from kiban.store.models import (
    Job,
    Replica,
    ServiceReplica,
    ServiceRevision,
    ServiceRow,
)

log = logging.getLogger("kiban.services.controller")

LOAD_FAILED = "KIBAN_LOAD_FAILED:"
MAX_CRASHES = 3  # replicas of a revision that exit before ever being ready: then it failed
LOG_TAIL_BYTES = 1 << 20
MAX_UNIX_CLIENTS = 256  # probe clients of replicas' Unix sockets kept at most


@dataclass
class _ReplicaView:
    row: ServiceReplica
    job: Job
    launched: Replica | None  # the job's active replica of its current attempt, once launched
    address: str | None = None


@dataclass
class ServiceController:
    """Reconciles services on its own thread every ``interval_s`` (or when woken)."""

    sessions: sessionmaker[Session]
    executor: Executor
    table: RoutingTable
    traffic: TrafficMetrics
    facts: Callable[[], ClusterFacts]
    clock: Clock = field(default_factory=SystemClock)
    interval_s: float = 0.5
    probe_timeout_s: float = 0.5
    on_jobs_changed: Callable[[], None] = lambda: None
    # Whether the replica at an address answers its readiness path (tests set their own).
    probe: Callable[[str, str], bool] | None = None
    scalers: dict[tuple[int, int], ScalerState] = field(default_factory=dict)
    decisions: dict[tuple[int, int], ScaleDecision] = field(default_factory=dict)
    """The autoscaler's last word on each scaling revision (service id, number), to show."""
    cpu: CpuMeter = field(default_factory=CpuMeter)
    revision_services: RevisionServices = field(init=False)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _http: httpx.Client = field(default_factory=lambda: httpx.Client(trust_env=False))
    _probes: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(8, thread_name_prefix="kiban-probe")
    )
    _unix_clients: dict[str, httpx.Client] = field(default_factory=dict)
    _unix_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.revision_services = RevisionServices(self.executor)

    # -- thread --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kiban-services", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._probes.shutdown(wait=True)
        self._http.close()
        for client in self._unix_clients.values():
            client.close()

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.run_once()
            except Exception:  # one bad pass must not end serving; the next one retries
                log.exception("service controller pass failed")
            self._wake.wait(self.interval_s)
            self._wake.clear()

    # -- a pass --------------------------------------------------------------------------------
    def run_once(self) -> None:
        now = self.clock.now()
        routes: list[Route] = []
        routed: set[tuple[str, str]] = set()  # (tenant, revision) of every service's split
        jobs_changed = False
        self.revision_services.sync(now)
        with self.sessions() as session:
            for service in session.scalars(select(ServiceRow)).all():
                route, changed = self._reconcile(session, service, now, routed)
                jobs_changed = jobs_changed or changed
                if route is not None:
                    routes.append(route)
            # After every service: a revision's Service goes only once no service routes to
            # it, and those of services removed from the store (or before a restart) go too.
            self.revision_services.remove_unrouted(routed)
            # The router learns first: once committed, a replica asked to stop may be stopped
            # by the control loop, and the router must no longer be choosing it by then.
            self._publish(routes)
            session.commit()
        if jobs_changed:
            self.on_jobs_changed()

    def _replicas(self, session: Session, service: ServiceRow) -> dict[int, list[_ReplicaView]]:
        """The service's replica jobs (with their launched replica) by revision id, oldest first:
        one query for the whole service."""
        rows = session.execute(
            select(ServiceReplica, Job, Replica)
            .join(Job, Job.id == ServiceReplica.job_id)
            .outerjoin(
                Replica,
                (Replica.job_id == Job.id) & (Replica.attempt == Job.attempt) & Replica.active,
            )
            .where(ServiceReplica.service_id == service.id)
            .order_by(ServiceReplica.index)
        ).all()
        by_revision: dict[int, list[_ReplicaView]] = {}
        for row, job, launched in rows:
            by_revision.setdefault(row.revision_id, []).append(_ReplicaView(row, job, launched))
        return by_revision

    def _reconcile(
        self, session: Session, service: ServiceRow, now: float, routed: set[tuple[str, str]]
    ) -> tuple[Route | None, bool]:
        revisions = revisions_of(session, service)
        replicas = self._replicas(session, service)
        spec = stored_spec(service)
        for revision in revisions:
            views = replicas.get(revision.id, [])
            self._account_ended(session, service, revision, views, now)
            self._probe(session, service, revision, views, now)
        if (
            service.canary_revision is not None
            and service.canary_percent >= 100
            and any(
                r.number == service.canary_revision and r.state == RevisionState.READY.value
                for r in revisions
            )
        ):
            promote_canary(session, service, now, by="rollout reached 100%")
        self._drop_failed_targets(service, revisions)
        serving = serving_revisions(
            (r.number, r.state, any(v.row.ready for v in replicas.get(r.id, []))) for r in revisions
        )
        targets = TrafficTargets(
            service.stable_revision, service.canary_revision, service.canary_percent
        )
        split = traffic_split(targets, serving) if service.deleted_at is None else {}
        changed = False
        for revision in revisions:
            views = replicas.get(revision.id, [])
            wanted = self._wanted(service, spec, revision, targets, views)
            revision.desired_replicas = wanted
            changed |= self._scale(session, service, revision, views, now)
        # A deleted service's split is empty: none of its revisions is routed, so the pass
        # removes their Services (even when the service itself is removed below).
        routed |= self._publish_revisions(service, revisions, replicas, set(split))
        if service.deleted_at is not None:
            if not any(not JobState(v.job.state).terminal for vs in replicas.values() for v in vs):
                self._remove(session, service, now)
            return None, changed
        by_number = {r.number: r for r in revisions}
        endpoints = tuple(
            Endpoint(
                revision=revision_name(service.name, by_number[number].number),
                address=view.address,
                ready=view.row.ready,
            )
            for number in split
            for view in replicas.get(by_number[number].id, [])
            if view.address is not None
        )
        route = Route(
            tenant=service.tenant,
            service=service.name,
            traffic={revision_name(service.name, n): share for n, share in split.items()},
            endpoints=endpoints,
            timeout_s=spec.timeout_s,
            public=spec.public,
            max_concurrency_per_endpoint=replica_concurrency(spec),
            concurrency_by_revision={
                revision_name(service.name, number): replica_concurrency(
                    spec.with_revision(stored_spec(by_number[number]))
                )
                for number in split
            },
        )
        return route, changed

    # -- step 1: ended replicas ----------------------------------------------------------------
    def _account_ended(
        self,
        session: Session,
        service: ServiceRow,
        revision: ServiceRevision,
        views: list[_ReplicaView],
        now: float,
    ) -> None:
        for view in views:
            if view.row.ended or not JobState(view.job.state).terminal:
                continue
            view.row.ended, view.row.ready = True, False
            if view.job.state == JobState.CANCELLED.value or view.row.ever_ready:
                continue
            revision.crashes += 1
            failure = self._load_failure(view.job) or _start_failure(view.job)
            if not RevisionState(revision.state).live or revision.ready_at is not None:
                continue
            if failure is not None or revision.crashes >= MAX_CRASHES:
                message = failure or (
                    f"{revision.crashes} replicas exited before becoming ready; the last: "
                    f"{view.job.message or view.job.state}"
                )
                self._fail(session, service, revision, message, now)

    def _load_failure(self, job: Job) -> str | None:
        """The model loader's message from a replica's log, if it wrote one."""
        try:
            data, _ = self.executor.read_log(job.id, 0, 0, LOG_TAIL_BYTES)
        except Exception:  # a log that cannot be read says nothing about the model
            return None
        for line in reversed(data.decode("utf-8", "replace").splitlines()):
            if line.startswith(LOAD_FAILED):
                return line.removeprefix(LOAD_FAILED).strip() or "the model failed to load"
        return None

    def _fail(
        self,
        session: Session,
        service: ServiceRow,
        revision: ServiceRevision,
        message: str,
        now: float,
    ) -> None:
        revision.state, revision.message = RevisionState.FAILED.value, message
        name = revision_name(service.name, revision.number)
        kept = (
            f"; traffic stays on {revision_name(service.name, service.stable_revision)}"
            if service.stable_revision not in (None, revision.number)
            else ""
        )
        service_event(
            session,
            service,
            reason="RevisionFailed",
            message=f"revision {name} failed: {message}{kept}",
            at=now,
            warning=True,
        )

    def _drop_failed_targets(self, service: ServiceRow, revisions: list[ServiceRevision]) -> None:
        failed = {r.number for r in revisions if r.state == RevisionState.FAILED.value}
        if service.canary_revision in failed and service.stable_revision is not None:
            service.canary_revision, service.canary_percent = None, 0

    # -- step 2: readiness ---------------------------------------------------------------------
    def _probe(
        self,
        session: Session,
        service: ServiceRow,
        revision: ServiceRevision,
        views: list[_ReplicaView],
        now: float,
    ) -> None:
        spec = stored_spec(revision)
        probed: list[_ReplicaView] = []
        for view in views:
            view.row.ready = False
            if view.job.state != JobState.RUNNING.value or view.job.master_port is None:
                continue
            port = replica_port(spec) or view.job.master_port
            if view.launched is not None:
                view.address = self.executor.replica_address(replica_ref(view.launched), port)
            if view.address is not None:
                probed.append(view)
        # All at once: a replica that hangs costs the pass one timeout, not one each.
        answers = self._probes.map(
            lambda v: self._ready(v.address or "", spec.readiness_path), probed
        )
        for view, ready in zip(probed, answers, strict=True):
            view.row.ready = ready
            view.row.ever_ready = view.row.ever_ready or ready
        if revision.state == RevisionState.LOADING.value and any(v.row.ready for v in views):
            revision.state, revision.ready_at = RevisionState.READY.value, now
            service_event(
                session,
                service,
                reason="RevisionReady",
                message=f"revision {revision_name(service.name, revision.number)} serves",
                at=now,
            )

    def _ready(self, address: str, path: str) -> bool:
        if self.probe is not None:
            return self.probe(address, path)
        try:
            if address.startswith(UNIX_PREFIX):  # the Unix socket the router will use too
                client, url = self._unix_client(address[len(UNIX_PREFIX) :]), "http://localhost"
            else:
                client, url = self._http, f"http://{address}"
            response = client.get(url + path, timeout=self.probe_timeout_s)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def _unix_client(self, path: str) -> httpx.Client:
        """The probes' client of one replica's Unix socket, made once (a client costs
        milliseconds to make); those of replicas gone are dropped once there are many."""
        with self._unix_lock:
            client = self._unix_clients.get(path)
            if client is None:
                if len(self._unix_clients) >= MAX_UNIX_CLIENTS:
                    for stale in self._unix_clients.values():
                        stale.close()
                    self._unix_clients.clear()
                transport = httpx.HTTPTransport(uds=path)
                client = self._unix_clients[path] = httpx.Client(
                    transport=transport, trust_env=False
                )
            return client

    # -- steps 3 and 4: how many replicas, and jobs to match -----------------------------------
    def _wanted(
        self,
        service: ServiceRow,
        spec: ServiceSpec,
        revision: ServiceRevision,
        targets: TrafficTargets,
        views: list[_ReplicaView],
    ) -> int:
        """Replicas a revision should have: none unless it is a live target; one at least
        while it loads; otherwise what the autoscaler says."""
        key = (service.id, revision.number)
        if (
            service.deleted_at is not None
            or not RevisionState(revision.state).live
            or revision.number not in (targets.stable, targets.canary)
        ):
            self.scalers.pop(key, None)
            self.decisions.pop(key, None)
            self.cpu.forget(key)
            return 0
        ready = sum(1 for v in views if v.row.ready)
        name = revision_name(service.name, revision.number)
        policy = scaling_policy(spec.with_revision(stored_spec(revision)))
        decision = decide(
            policy,
            self.scalers.get(key, ScalerState()),
            self.traffic.concurrency_samples(service.tenant, service.name, name),
            ready_replicas=ready,
            waiting=self.traffic.waiting(service.tenant, service.name, name),
            now=self.traffic.clock(),  # the samples' clock
            cpu=self._cpu_samples(key, revision, views) if policy.metric == "cpu" else None,
        )
        self.scalers[key] = decision.state
        self.decisions[key] = decision
        if revision.state == RevisionState.LOADING.value:
            # Knative's initial scale of 1: a new revision shows that its model loads (and a
            # canary gets a replica to be ready with) before it may scale to zero.
            return max(decision.desired, 1)
        return decision.desired

    def _cpu_samples(
        self, key: tuple[int, int], revision: ServiceRevision, views: list[_ReplicaView]
    ) -> list[CpuSample] | None:
        """Read the ready replicas' CPU use into the meter; the revision's samples, or None
        when the executor cannot tell."""
        requested = stored_spec(revision).resources.cpu / 1000
        if Capability.CPU_USAGE not in self.executor.capabilities or requested <= 0:
            return None
        now = self.traffic.clock()
        if not self.cpu.due(key, now):
            return self.cpu.samples(key)
        readings: dict[str, float] = {}
        for view in views:
            if view.row.ready and view.launched is not None:
                used = self.executor.replica_cpu_seconds(replica_ref(view.launched))
                if used is not None:
                    readings[f"{view.job.id}/{view.job.attempt}"] = used
        self.cpu.observe(key, readings, requested_cores=requested, now=now)
        return self.cpu.samples(key)

    def _scale(
        self,
        session: Session,
        service: ServiceRow,
        revision: ServiceRevision,
        views: list[_ReplicaView],
        now: float,
    ) -> bool:
        live = [v for v in views if not JobState(v.job.state).terminal]
        wanted = revision.desired_replicas
        if len(live) == wanted:
            return False
        principal = Principal(name=f"service {service.name}", tenant=service.tenant, is_admin=False)
        if len(live) > wanted:
            # Pending ones first, then the newest: the ones that serve longest are kept.
            extra = sorted(
                live,
                key=lambda v: (v.job.state != JobState.PENDING.value, -v.row.index),
            )[: len(live) - wanted]
            for view in extra:
                # Out of the router's choices in this pass's route, before its process may be
                # stopped: a new request sent to it then would fail. Its in-flight ones finish.
                view.row.ready = False
                if view.job.state == JobState.STOPPING.value:
                    continue
                try:
                    jobs.cancel(session, principal, view.job.id, now)
                except ServiceError as exc:
                    log.warning("could not stop replica %s: %s", view.job.id, exc.message)
            return True
        spec = stored_spec(revision)
        policy = current_policy(session)
        spec = spec.model_copy(update={"priority_class": serving_priority_class(spec, policy)})
        used = {v.row.index for v in views}
        index = 0
        for _ in range(wanted - len(live)):
            while index in used:
                index += 1
            used.add(index)
            manifest = replica_job_manifest(
                service=service.name,
                revision=revision_name(service.name, revision.number),
                index=index,
                spec=spec,
            )
            document = manifest.model_dump(mode="json", by_alias=True, exclude_none=True)
            try:
                prepared = jobs.prepare_submission(
                    session, principal, document, facts=self.facts(), at=now, policy=policy
                )
            except ServiceError as exc:
                self._fail(session, service, revision, exc.message, now)
                return False
            except Exception as exc:  # a spec the policy now refuses: say so, once
                self._fail(session, service, revision, str(exc), now)
                return False
            # The service's own warnings were told when it was applied; its replicas' would
            # repeat them (and the fixed port each replica names on one machine) every time.
            kept = [e for e in prepared.events if e.reason != "SubmittedWithWarnings"]
            for _ in range(ID_RENEWALS):  # ids end in 6 random characters: rarely, one is taken
                if session.get(Job, prepared.job.id) is None:
                    break
                jobs.renew_job_id(prepared.job, kept)
            session.add_all([prepared.job, *kept])
            session.flush()
            session.add(
                ServiceReplica(
                    job_id=prepared.job.id,
                    service_id=service.id,
                    revision_id=revision.id,
                    index=index,
                    ready=False,
                    ever_ready=False,
                    ended=False,
                )
            )
        return True

    def _publish_revisions(
        self,
        service: ServiceRow,
        revisions: list[ServiceRevision],
        replicas: dict[int, list[_ReplicaView]],
        routed: set[int],
    ) -> set[tuple[str, str]]:
        """Make the Service of each of the service's revisions that takes traffic (on an
        executor that has them); the (tenant, revision) of those revisions."""
        keys = set()
        for revision in revisions:
            if revision.number not in routed:
                continue
            name = revision_name(service.name, revision.number)
            keys.add((service.tenant, name))
            ports = [v.job.master_port for v in replicas.get(revision.id, [])]
            port = next((p for p in ports if p is not None), None)
            if port is not None:
                self.revision_services.publish(service.tenant, service.name, name, port)
        return keys

    # -- deletion and routes -------------------------------------------------------------------
    def _remove(self, session: Session, service: ServiceRow, now: float) -> None:
        session.execute(delete(ServiceReplica).where(ServiceReplica.service_id == service.id))
        session.execute(delete(ServiceRevision).where(ServiceRevision.service_id == service.id))
        service_event(
            session,
            service,
            reason="Removed",
            message="every replica has stopped; the service is gone",
            at=now,
        )
        session.delete(service)
        for key in [k for k in self.scalers if k[0] == service.id]:
            del self.scalers[key]

    def _publish(self, routes: list[Route]) -> None:
        keep = {(r.tenant, r.service) for r in routes}
        for route in routes:
            self.table.set(route)
        for tenant, name in [k for k in self.table.keys() if k not in keep]:  # noqa: SIM118
            self.table.remove(tenant, name)


def _start_failure(job: Job) -> str | None:
    """The executor's message when a replica's container could not start (its image is not
    there, its configuration is wrong): every replica of the revision would fail alike."""
    return job.message if cannot_start(job.message) else None
