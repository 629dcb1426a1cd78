"""The assembled platform: store, executor, control loop and what the API needs of them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from kiban.clock import Clock, SystemClock
from kiban.control.loop import ControlLoop
from kiban.control.loop_settings import LoopSettings
from kiban.control.notebook_controller import NotebookController
from kiban.control.serving_controller import ServiceController
from kiban.domain.cluster import ClusterConfig, ClusterPolicy
from kiban.domain.job_relations import DEFAULT_MAX_ARRAY_SIZE
from kiban.domain.notebook import DEFAULT_READY_TIMEOUT_S
from kiban.domain.roles import Capability, may
from kiban.executors.base import Executor, checkpoint_detection_unavailable
from kiban.services import events
from kiban.services.audit import AuditWriter
from kiban.services.auth import Principal, authenticate, ensure_admin_token
from kiban.services.cluster_facts import ClusterFacts, KnownFacts
from kiban.services.epilogue import Epilogue
from kiban.services.errors import ServiceError
from kiban.services.health_sweeps import HealthSweeps
from kiban.services.lookup_cache import LookupCache
from kiban.services.nodes import sync_nodes
from kiban.services.policy import apply_startup_policy, current_policy
from kiban.services.submissions import SubmissionWriter
from kiban.serving.router.server import RouterServer
from kiban.serving.router.table import RoutingTable
from kiban.serving.router.traffic import TrafficMetrics
from kiban.store.db import make_engine, migrate, session_factory
from kiban.store.models import Event

log = logging.getLogger("kiban.platform")

EXECUTOR_EVENTS = "Executor"
"""The kind of the events about the executor itself (their name is the executor's)."""
NO_CHECKPOINT_DETECTION = "CheckpointDetectionUnavailable"


@dataclass
class Platform:
    """Everything one kiban control plane holds; the API and the loop share it."""

    home: Path
    engine: Engine
    sessions: sessionmaker[Session]
    """The API's sessions (``engine``); the control plane's own are ``control_sessions``."""
    executor: Executor
    clock: Clock
    loop: ControlLoop
    submissions: SubmissionWriter
    known_facts: KnownFacts
    lookups: LookupCache = field(default_factory=LookupCache)
    admin_token: str | None = None
    policy: ClusterPolicy = field(default_factory=ClusterPolicy)
    routes: RoutingTable = field(default_factory=RoutingTable)
    traffic: TrafficMetrics = field(default_factory=TrafficMetrics)
    router: RouterServer | None = None
    control_engine: Engine | None = None
    """The engine of the control loop, the service controller and the submission writer, whose
    connections requests cannot take (None: they share ``engine``)."""
    services: ServiceController = field(init=False)
    sweeps: HealthSweeps | None = None  # allreduce sweeps (build_platform makes them)
    notebooks: NotebookController | None = None  # readiness and culling (build_platform's)
    max_array_size: int = DEFAULT_MAX_ARRAY_SIZE  # indices one array may have (kiban up option)
    audit: AuditWriter | None = None
    """Appends the audit log's records (None: auditing is off, ``kiban up --no-audit``)."""

    def __post_init__(self) -> None:
        self.services = ServiceController(
            sessions=self.control_sessions,
            executor=self.executor,
            table=self.routes,
            traffic=self.traffic,
            facts=lambda: self.facts,
            clock=self.clock,
            on_jobs_changed=self.loop.wake,
            submissions=self.submissions,
        )

    def start_router(self, host: str, port: int) -> None:
        """Start the router: inference services' URLs (an OSError if it cannot listen)."""
        self.router = RouterServer(
            self.routes, host=host, port=port, authorize=self.may_call, metrics=self.traffic
        )
        self.router.start()

    def may_call(self, tenant: str, token: str) -> bool:
        """Whether a bearer token may call a tenant's services (its members, tenant-admins and
        admins; not its viewers: a call uses the service's GPUs)."""

        def load() -> Principal | None:
            with self.sessions() as session:
                try:
                    principal = authenticate(session, f"Bearer {token}", self.clock.now())
                except ServiceError:
                    return None
                session.commit()  # its last use
                return principal

        principal = self.lookups.get(("principal", f"Bearer {token}"), load)
        return (
            principal is not None
            and not principal.expired(self.clock.now())
            and may(principal.role, Capability.SUBMIT)
            and principal.can_see(tenant)
        )

    @property
    def control_sessions(self) -> sessionmaker[Session]:
        """Sessions on the control plane's own connections."""
        return self.loop.sessions

    def service_url(self, tenant: str, name: str) -> str | None:
        """A service's stable URL on the router (None while the router is not running)."""
        return None if self.router is None else self.router.url_for(tenant, name)

    def close(self) -> None:
        """Stop the router, the service controller, the control loop, the submission writer
        and the executor; close the store."""
        self.services.stop()
        if self.router is not None:
            self.router.stop()
        self.loop.stop()
        self.submissions.stop()
        if self.audit is not None:
            self.audit.stop()
        self.engine.dispose()
        if self.control_engine is not None:
            self.control_engine.dispose()
        closing = self.executor.offers.closing  # executors holding threads or connections
        if closing is not None:
            closing.close()

    @property
    def token_file(self) -> Path:
        return self.home / "token"

    @property
    def facts(self) -> ClusterFacts:
        """What submissions are checked against now (the nodes as last stored)."""
        return self.known_facts.current

    def refresh_facts(self) -> None:
        """Read the stored nodes and the executor's capabilities again."""
        self.known_facts.refresh()

    def refresh_policy(self) -> None:
        """Read the current policy again (after it changed) and forget cached queue lookups."""
        with self.sessions() as session:
            self.policy = current_policy(session)
        self.lookups.clear()

    def policy_changed(self) -> None:
        """What the API does after a committed policy change: reload it, wake the loop."""
        self.refresh_policy()
        self.loop.wake()


def build_platform(
    *,
    home: Path,
    db_url: str | None,
    executor: Executor,
    config: ClusterConfig | None = None,
    clock: Clock | None = None,
    loop_settings: LoopSettings | None = None,
    admin_token_in_home: bool = True,
    notebook_ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    max_array_size: int = DEFAULT_MAX_ARRAY_SIZE,
    audit: bool = True,
) -> Platform:
    """Open (and migrate) the store, register nodes, apply the policy, make the admin token
    (written to ``<home>/token``; not ``admin_token_in_home``: only returned, when new).

    The cluster file's policy, when it has one, becomes the current policy (see
    ``apply_startup_policy``); a policy the store's nodes or jobs refuse raises (SpecError or
    ServiceError) and nothing is committed. ``loop_settings``: the control loop's pace (its
    ``node_sync_s``: how often it asks the executor for its nodes again, for a cluster whose
    nodes change). ``max_array_size``: the most indices one job array may have. ``audit``:
    whether state-changing requests leave audit records (off only to measure what they cost).
    """
    from kiban.store.db import CONTROL_POOL, default_url

    home.mkdir(parents=True, exist_ok=True)
    clock = clock or SystemClock()
    url = db_url or default_url(home)
    engine = make_engine(url)
    migrate(engine)
    sessions = session_factory(engine)
    now = clock.now()
    nodes = executor.nodes()
    try:
        with sessions() as session:
            sync_nodes(session, nodes, now)
            apply_startup_policy(session, config, now)
            token_file = home / "token" if admin_token_in_home else None
            admin_token = ensure_admin_token(session, token_file, now)
            report_missing_capabilities(session, executor, now)
            session.commit()
    except BaseException:
        engine.dispose()
        raise
    control_engine = make_engine(url, CONTROL_POOL)
    control = session_factory(control_engine)
    known_facts = KnownFacts(sessions, executor)
    loop_settings = loop_settings or LoopSettings()
    sweeps = HealthSweeps(
        control, executor, lambda: known_facts.current, every_s=loop_settings.sweep_every_s
    )
    notebooks = NotebookController(control, executor, ready_timeout_s=notebook_ready_timeout_s)
    loop = ControlLoop(
        control,
        executor,
        clock=clock,
        settings=loop_settings,
        on_nodes_changed=known_facts.refresh,  # submissions are checked against the nodes now
        health_hooks=(sweeps.tick, Epilogue(control).tick, notebooks.tick),
    )
    platform = Platform(
        submissions=SubmissionWriter(control, on_stored=loop.jobs_stored),
        home=home,
        engine=engine,
        control_engine=control_engine,
        sessions=sessions,
        executor=executor,
        clock=clock,
        loop=loop,
        known_facts=known_facts,
        admin_token=admin_token,
        max_array_size=max_array_size,
        audit=AuditWriter(control) if audit else None,
        sweeps=sweeps,
        notebooks=notebooks,
    )
    platform.refresh_facts()
    platform.refresh_policy()
    return platform


def report_missing_capabilities(session: Session, executor: Executor, now: float) -> None:
    """Say what the executor cannot do that users may count on: checkpoints written in
    ``$KIBAN_CHECKPOINT_DIR`` go unnoticed where it has no checkpoint probe (only reported
    ones count). Logged at each start; a warning event of the executor, once per store."""
    message = checkpoint_detection_unavailable(executor)
    if message is None:
        return
    log.warning("%s: only checkpoints reported with kiban checkpoint count", message)
    recorded = session.scalar(
        select(Event.id).where(
            Event.object_kind == EXECUTOR_EVENTS,
            Event.object_name == executor.name,
            Event.reason == NO_CHECKPOINT_DETECTION,
        )
    )
    if recorded is None:
        events.record(
            session,
            kind=EXECUTOR_EVENTS,
            name=executor.name,
            reason=NO_CHECKPOINT_DETECTION,
            message=f"{message}: only checkpoints reported with kiban checkpoint count",
            at=now,
            warning=True,
        )
