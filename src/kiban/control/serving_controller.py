"""The service controller: keeps each inference service's replicas, readiness and routes true.

Every pass is observe, decide, apply (``serving_plan`` says what each step decides):

1. Observe: one short read transaction copies every service, its revisions and replica jobs
   into plain values (``ServiceView``; ``serving_observe``).
2. With no session open: the running replicas' addresses, their readiness probes and the logs
   of replicas that ended unready are read, all at once within a bound and each with a timeout
   (a replica that hangs costs the pass one timeout and holds no lock; ``serving_probes``);
   then the router's traffic and, for ``scaleMetric: cpu``, the ready replicas' CPU use.
3. Decide: ``plan_service`` turns each service's observations into a ``ServicePlan``.
4. Apply: each service's plan in its own short transaction, which reads again the rows it
   changes and gives way, until the next pass, to a rollout changed since it was observed.
   Replica jobs are cancelled as a user's are (``jobs.cancel``), and made as an API submission
   is: ``jobs.prepare_submission`` and the submission writer, which stores the job and its
   replica row in one transaction.
5. The routes (traffic split and ready endpoints) go to the router before each service's
   transaction commits.

A deleted service's replicas are cancelled, and the service removed once none is left.

On executors that give a revision its own address (a Kubernetes Service), each revision that
takes traffic gets one, and after every pass each one made for a revision that takes no
traffic, of any service in the store or of none, is removed (``revision_services``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session, sessionmaker

from kiban.clock import Clock, SystemClock
from kiban.control.revision_services import RevisionServices
from kiban.control.serving_observe import observe_services
from kiban.control.serving_plan import (
    PROMOTED_BY,
    FailureReason,
    Probes,
    RevisionFailure,
    RevisionTraffic,
    RevisionView,
    ServicePlan,
    ServiceView,
    Traffic,
    plan_service,
)
from kiban.control.serving_probes import ReplicaProber
from kiban.domain.event_reasons import JobEventReason, ServiceEventReason
from kiban.domain.rollout import RevisionState, revision_name
from kiban.domain.service_replica import replica_job_manifest
from kiban.executors.base import Executor
from kiban.services import jobs
from kiban.services.auth import Principal
from kiban.services.errors import ServiceError
from kiban.services.jobs import ClusterFacts
from kiban.services.policy import current_policy
from kiban.services.serving import (
    promote_canary,
    service_event,
    serving_priority_class,
)
from kiban.services.submissions import SubmissionWriter
from kiban.serving.autoscaler import ScaleDecision, ScalerState
from kiban.serving.capacity import scaling_policy
from kiban.serving.cpu_use import CpuMeter, CpuSample
from kiban.serving.router.table import RoutingTable
from kiban.serving.router.traffic import TrafficMetrics
from kiban.store.models import Event, Job
from kiban.store.models_serving import ServiceReplica, ServiceRevision, ServiceRow

log = logging.getLogger("kiban.services.controller")

STORE_TIMEOUT_S = 60.0  # how long a pass waits for the submission writer to store its replicas


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
    gather_timeout_s: float = 5.0
    """How long a pass waits for its probes and log reads; one not answered by then counts as
    not ready (a probe) or silent (a log)."""
    on_jobs_changed: Callable[[], None] = lambda: None
    submissions: SubmissionWriter | None = None
    """Where new replica jobs are stored: the platform's writer, as the API's submissions
    (None: one of the controller's own)."""
    # Whether the replica at an address answers its readiness path (tests set their own).
    probe: Callable[[str, str], bool] | None = None
    scalers: dict[tuple[int, int], ScalerState] = field(default_factory=dict)
    decisions: dict[tuple[int, int], ScaleDecision] = field(default_factory=dict)
    """The autoscaler's last word on each scaling revision (service id, number), to show."""
    cpu: CpuMeter = field(default_factory=CpuMeter)
    addresses: dict[str, str] = field(default_factory=dict)
    """Job id to the address of each running model server replica, as the last pass found
    them (Prometheus's service discovery lists them)."""
    ports: dict[str, int] = field(default_factory=dict)
    """Job id to the TCP port each of those replicas serves (beside a Unix socket, if any)."""
    revision_services: RevisionServices = field(init=False)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    prober: ReplicaProber = field(init=False)
    _writer: SubmissionWriter = field(init=False)

    def __post_init__(self) -> None:
        self.revision_services = RevisionServices(self.executor)
        self.prober = ReplicaProber(self.executor)
        self._writer = self.submissions or SubmissionWriter(self.sessions)

    # -- thread --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kiban-services", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.prober.close()
        if self.submissions is None:
            self._writer.stop()

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
        self.revision_services.sync(now)
        views = self._observe()
        probes = self._gather(views)
        self.addresses = dict(probes.addresses)
        self.ports = dict(probes.ports)
        routed: set[tuple[str, str]] = set()  # (tenant, revision) of every service's split
        jobs_changed = False
        for view in views:
            plan = plan_service(view, probes, self._traffic(view, probes), now)
            self._remember(view, plan)
            try:
                jobs_changed |= self._apply(view, plan, now)
            except Exception:  # one service's trouble must not keep the others waiting
                log.exception("could not apply the plan of service %s", view.name)
            routed |= {(view.tenant, r.name) for r in plan.routed}
            for revision in plan.routed:
                if revision.port is not None:
                    publish = self.revision_services.publish
                    publish(view.tenant, view.name, revision.name, revision.port)
        # After every service: a revision's Service goes only once no service routes to it,
        # and those of services removed from the store (or before a restart) go too.
        self.revision_services.remove_unrouted(routed)
        kept = {(v.tenant, v.name) for v in views if not v.deleted}
        for tenant, name in [k for k in self.table.keys() if k not in kept]:  # noqa: SIM118
            self.table.remove(tenant, name)
        if jobs_changed:
            self.on_jobs_changed()

    # -- observe -------------------------------------------------------------------------------
    def _observe(self) -> list[ServiceView]:
        """Every service as plain values, read in one short transaction."""
        with self.sessions() as session:
            return observe_services(session)

    def _gather(self, views: Iterable[ServiceView]) -> Probes:
        """Probe the running replicas and read the logs of those that ended unready, with no
        session open, within ``gather_timeout_s``."""
        return self.prober.gather(views, self._ready, self.gather_timeout_s)

    def _ready(self, address: str, path: str) -> bool:
        if self.probe is not None:
            return self.probe(address, path)
        return self.prober.ready(address, path, self.probe_timeout_s)

    def _traffic(self, view: ServiceView, probes: Probes) -> Traffic:
        """The autoscaler's inputs for the revisions that may keep replicas: the router's
        samples and waiting requests, the scaler's last state, and for ``scaleMetric: cpu``
        the ready replicas' CPU use."""
        now = self.traffic.clock()  # the samples' clock
        found: dict[int, RevisionTraffic] = {}
        for revision in view.scaling_candidates():
            key = (view.id, revision.number)
            name = revision_name(view.name, revision.number)
            policy = scaling_policy(view.spec.with_revision(revision.spec))
            found[revision.number] = RevisionTraffic(
                samples=tuple(self.traffic.concurrency_samples(view.tenant, view.name, name)),
                waiting=self.traffic.waiting(view.tenant, view.name, name),
                cpu=self._cpu_samples(key, view, revision, probes, now)
                if policy.metric == "cpu"
                else None,
                scaler=self.scalers.get(key, ScalerState()),
            )
        return Traffic(now, found)

    def _cpu_samples(
        self,
        key: tuple[int, int],
        view: ServiceView,
        revision: RevisionView,
        probes: Probes,
        now: float,
    ) -> tuple[CpuSample, ...] | None:
        """Read the ready replicas' CPU use into the meter; the revision's samples, or None
        when the executor cannot tell."""
        requested = revision.spec.resources.cpu / 1000
        meter = self.executor.offers.cpu_meter
        if meter is None or requested <= 0:
            return None
        if self.cpu.due(key, now):
            readings: dict[str, float] = {}
            for replica in view.replicas_of(revision):
                if probes.ready.get(replica.job_id) and replica.launched is not None:
                    used = meter.replica_cpu_seconds(replica.launched)
                    if used is not None:
                        readings[f"{replica.job_id}/{replica.launched.attempt}"] = used
            self.cpu.observe(key, readings, requested_cores=requested, now=now)
        return tuple(self.cpu.samples(key))

    def _remember(self, view: ServiceView, plan: ServicePlan) -> None:
        """Keep the autoscaler's decisions (its state for the next pass, and what describe
        shows); forget those of revisions that keep no replicas, and of a removed service."""
        for scaling in plan.scaling:
            if scaling.decision is not None:
                key = (view.id, scaling.revision)
                self.scalers[key] = scaling.decision.state
                self.decisions[key] = scaling.decision
        for number in plan.forget:
            key = (view.id, number)
            self.scalers.pop(key, None)
            self.decisions.pop(key, None)
            self.cpu.forget(key)
        if plan.remove:
            for key in [k for k in self.scalers if k[0] == view.id]:
                del self.scalers[key]

    # -- apply ---------------------------------------------------------------------------------
    def _apply(self, view: ServiceView, plan: ServicePlan, now: float) -> bool:
        """Apply a service's plan in one short transaction (then store its new replica jobs);
        whether replica jobs were asked to start or stop. A service whose rollout changed
        since it was observed is left as it is until the next pass."""
        launches: list[_Launching] = []
        with self.sessions() as session:
            service = session.get(ServiceRow, view.id, with_for_update=True)
            if service is None:
                return False
            revisions = {
                r.id: r
                for r in session.scalars(
                    select(ServiceRevision).where(ServiceRevision.service_id == service.id)
                )
            }
            if not _as_observed(service, revisions.values(), view):
                log.info("service %s changed during the pass; it is reconciled next", view.name)
                return False
            by_number = {r.number: r for r in revisions.values()}
            if plan.replicas:
                rows = session.scalars(
                    select(ServiceReplica).where(
                        ServiceReplica.job_id.in_([u.job_id for u in plan.replicas])
                    )
                )
                updates = {u.job_id: u for u in plan.replicas}
                for row in rows:
                    update = updates[row.job_id]
                    row.ready, row.ever_ready, row.ended = (
                        update.ready,
                        update.ever_ready,
                        update.ended,
                    )
            for counts in plan.revisions:
                revision = revisions[counts.id]
                revision.crashes = counts.crashes
                revision.desired_replicas = counts.desired_replicas
            for failure in plan.failed:
                self._fail(session, service, by_number[failure.revision], failure, now)
            for number in plan.became_ready:
                revision = by_number[number]
                revision.state, revision.ready_at = RevisionState.READY.value, now
                service_event(
                    session,
                    service,
                    reason=ServiceEventReason.REVISION_READY,
                    message=f"revision {revision_name(service.name, number)} serves",
                    at=now,
                )
            if plan.promote:
                promote_canary(session, service, now, by=PROMOTED_BY)
            if plan.drop_canary:
                service.canary_revision, service.canary_percent = None, 0
            principal = Principal(
                name=f"service {service.name}", tenant=service.tenant, is_admin=False
            )
            for job_id in plan.cancel:
                try:
                    jobs.cancel(session, principal, job_id, now)
                except ServiceError as exc:  # it ended meanwhile, or is gone
                    log.warning("could not stop replica %s: %s", job_id, exc.message)
            launches = self._prepare(session, service, by_number, view, plan, principal, now)
            if plan.remove:
                self._remove(session, service, now)
            elif plan.route is not None:
                # The router learns first: once committed, a replica asked to stop may be
                # stopped by the control loop, and the router must no longer choose it then.
                self.table.set(plan.route)
            session.commit()
        self._store(view, launches)
        # Replicas asked to stop, or new ones stored (a refused one changes no job).
        return bool(launches) or any(s.change < 0 for s in plan.scaling)

    def _prepare(
        self,
        session: Session,
        service: ServiceRow,
        revisions: dict[int, ServiceRevision],
        view: ServiceView,
        plan: ServicePlan,
        principal: Principal,
        now: float,
    ) -> list[_Launching]:
        """The plan's new replica jobs, accepted as any submission is (a revision whose
        replica is refused fails, and makes no more)."""
        if not plan.launch:
            return []
        policy = current_policy(session)
        facts = self.facts()
        specs = {r.number: r.spec for r in view.revisions}
        refused: set[int] = set()
        made: list[_Launching] = []
        for launch in plan.launch:
            if launch.revision in refused:
                continue
            spec = specs[launch.revision]
            spec = spec.model_copy(update={"priority_class": serving_priority_class(spec, policy)})
            manifest = replica_job_manifest(
                service=service.name,
                revision=revision_name(service.name, launch.revision),
                index=launch.index,
                spec=spec,
            )
            document = manifest.model_dump(mode="json", by_alias=True, exclude_none=True)
            try:
                prepared = jobs.prepare_submission(
                    session, principal, document, facts=facts, at=now, policy=policy
                )
            except Exception as exc:  # a spec the policy now refuses: say so, once
                message = exc.message if isinstance(exc, ServiceError) else str(exc)
                failure = RevisionFailure(launch.revision, FailureReason.REFUSED, message)
                self._fail(session, service, revisions[launch.revision], failure, now)
                refused.add(launch.revision)
                continue
            # The service's own warnings were told when it was applied; its replicas' would
            # repeat them (and the fixed port each replica names on one machine) every time.
            warned = JobEventReason.SUBMITTED_WITH_WARNINGS
            kept = tuple(e for e in prepared.events if e.reason != warned)
            made.append(_Launching(prepared.job, kept, launch.revision_id, launch.index))
        return made

    def _store(self, view: ServiceView, launches: list[_Launching]) -> None:
        """Store new replica jobs through the submission writer, each with its replica row,
        and wait until they are (no session of the pass is open meanwhile)."""
        waiting = [
            (
                made.job.id,
                self._writer.write(made.job, *made.events, along=made.row_adder(view.id)),
            )
            for made in launches
        ]
        for job_id, future in waiting:
            try:
                future.result(timeout=STORE_TIMEOUT_S)
            except Exception as exc:  # the next pass sees the slot empty and tries again
                log.warning("could not store replica %s of %s: %s", job_id, view.name, exc)

    def _fail(
        self,
        session: Session,
        service: ServiceRow,
        revision: ServiceRevision,
        failure: RevisionFailure,
        now: float,
    ) -> None:
        revision.state, revision.message = RevisionState.FAILED.value, failure.message
        name = revision_name(service.name, revision.number)
        kept = (
            f"; traffic stays on {revision_name(service.name, service.stable_revision)}"
            if service.stable_revision not in (None, revision.number)
            else ""
        )
        service_event(
            session,
            service,
            reason=ServiceEventReason.REVISION_FAILED,
            message=f"revision {name} failed: {failure.message}{kept}",
            at=now,
            warning=True,
        )

    def _remove(self, session: Session, service: ServiceRow, now: float) -> None:
        session.execute(delete(ServiceReplica).where(ServiceReplica.service_id == service.id))
        session.execute(delete(ServiceRevision).where(ServiceRevision.service_id == service.id))
        service_event(
            session,
            service,
            reason=ServiceEventReason.REMOVED,
            message="every replica has stopped; the service is gone",
            at=now,
        )
        session.delete(service)


@dataclass(frozen=True)
class _Launching:
    """A replica job accepted for submission, and the slot it fills."""

    job: Job
    events: tuple[Event, ...]
    revision_id: int
    index: int

    def row_adder(self, service_id: int) -> Callable[[Session, Job], None]:
        """The replica's row, written with its job (under the id the job is stored with)."""

        def add(session: Session, job: Job) -> None:
            session.execute(
                insert(ServiceReplica),
                [
                    {
                        "job_id": job.id,
                        "service_id": service_id,
                        "revision_id": self.revision_id,
                        "index": self.index,
                        "ready": False,
                        "ever_ready": False,
                        "ended": False,
                    }
                ],
            )

        return add


def _as_observed(
    service: ServiceRow, revisions: Iterable[ServiceRevision], view: ServiceView
) -> bool:
    """Whether a service's rollout and revisions are still what the pass observed."""
    return (
        service.stable_revision,
        service.canary_revision,
        service.canary_percent,
        service.deleted_at is not None,
        sorted((r.id, r.state) for r in revisions),
    ) == (
        view.stable_revision,
        view.canary_revision,
        view.canary_percent,
        view.deleted,
        sorted((r.id, r.state.value) for r in view.revisions),
    )
