"""The assembled platform: store, executor, control loop and what the API needs of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from kiban.clock import Clock, SystemClock
from kiban.control.loop import ControlLoop
from kiban.domain.cluster import ClusterConfig
from kiban.executors.base import Executor, NodeInfo
from kiban.services import events
from kiban.services.auth import ensure_admin_token
from kiban.services.jobs import ClusterFacts
from kiban.services.lookup_cache import LookupCache
from kiban.services.submissions import SubmissionWriter
from kiban.services.tenants import ensure_tenant
from kiban.store.db import make_engine, migrate, session_factory
from kiban.store.models import Node, Queue


@dataclass
class Platform:
    """Everything one kiban control plane holds; the API and the loop share it."""

    home: Path
    engine: Engine
    sessions: sessionmaker[Session]
    executor: Executor
    clock: Clock
    loop: ControlLoop
    submissions: SubmissionWriter
    lookups: LookupCache = field(default_factory=LookupCache)
    facts: ClusterFacts = field(default_factory=ClusterFacts)
    admin_token: str | None = None

    def close(self) -> None:
        """Stop the control loop and the submission writer, and close the store."""
        self.loop.stop()
        self.submissions.stop()
        self.engine.dispose()

    @property
    def token_file(self) -> Path:
        return self.home / "token"

    def refresh_facts(self) -> None:
        with self.sessions() as session:
            rows = session.scalars(select(Node)).all()
            shapes = tuple((n.gpus, n.cpu_millis, n.memory) for n in rows)
        self.facts = ClusterFacts(node_shapes=shapes, capabilities=self.executor.capabilities)


def sync_nodes(session: Session, nodes: list[NodeInfo], at: float) -> None:
    """Make the node table match what the executor reports, keeping admins' cordons."""
    reported = {n.name: n for n in nodes}
    for stale in session.scalars(select(Node)).all():
        if stale.name not in reported:
            session.delete(stale)
            events.record(
                session,
                kind="Node",
                name=stale.name,
                reason="Removed",
                message="no longer reported by the executor",
                at=at,
            )
    for info in nodes:
        row = session.get(Node, info.name)
        if row is None:
            row = Node(name=info.name, cordoned=False, updated_at=at, labels={})
            session.add(row)
            events.record(
                session,
                kind="Node",
                name=info.name,
                reason="Registered",
                message=f"{info.gpus} GPUs, {info.cpu_millis / 1000:g} CPUs",
                at=at,
            )
        row.gpus = info.gpus
        row.cpu_millis = info.cpu_millis
        row.memory = info.memory
        row.labels = dict(info.labels)
        row.healthy = info.healthy
        row.health_message = info.health_message
        row.updated_at = at


def apply_queues(session: Session, config: ClusterConfig, at: float) -> None:
    """Create or update the queues the cluster file lists; with none, a ``default`` queue."""
    declared = config.queues
    if not declared and session.scalars(select(Queue).limit(1)).first() is None:
        ensure_tenant(session, "default", at)
        session.add(
            Queue(
                name="default",
                tenant="default",
                gpu_quota=None,
                strategy="StrictFIFO",
                created_at=at,
            )
        )
        return
    for decl in declared:
        ensure_tenant(session, decl.tenant, at)
        row = session.get(Queue, decl.name)
        if row is None:
            row = Queue(
                name=decl.name,
                tenant=decl.tenant,
                created_at=at,
                gpu_quota=decl.gpu_quota,
                strategy=decl.strategy,
            )
            session.add(row)
        row.tenant = decl.tenant
        row.gpu_quota = decl.gpu_quota
        row.strategy = decl.strategy


def build_platform(
    *,
    home: Path,
    db_url: str | None,
    executor: Executor,
    config: ClusterConfig | None = None,
    clock: Clock | None = None,
    tick_s: float = 0.2,
) -> Platform:
    """Open (and migrate) the store, register nodes and queues, and make the admin token."""
    from kiban.store.db import default_url

    home.mkdir(parents=True, exist_ok=True)
    clock = clock or SystemClock()
    engine = make_engine(db_url or default_url(home))
    migrate(engine)
    sessions = session_factory(engine)
    now = clock.now()
    nodes = executor.nodes()
    with sessions() as session:
        sync_nodes(session, nodes, now)
        apply_queues(session, config or ClusterConfig(), now)
        admin_token = ensure_admin_token(session, home / "token", now)
        session.commit()
    loop = ControlLoop(sessions, executor, clock=clock, tick_s=tick_s)
    platform = Platform(
        submissions=SubmissionWriter(sessions),
        home=home,
        engine=engine,
        sessions=sessions,
        executor=executor,
        clock=clock,
        loop=loop,
        admin_token=admin_token,
    )
    platform.refresh_facts()
    return platform
