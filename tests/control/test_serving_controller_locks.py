"""The service controller probes with no session open and applies in short transactions: a
readiness probe that hangs holds no session and no row lock (the jobs of its service and of the
services reconciled before it can be settled or cancelled meanwhile), and a user's change made
while the pass probes wins over the plan made before it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import select, update

from kiban.domain.roles import Role
from kiban.platform import Platform
from kiban.services import jobs, serving
from kiban.services.auth import Principal
from kiban.store.models import Event, Job
from kiban.store.models_serving import ServiceReplica, ServiceRevision, ServiceRow

ALICE = Principal(name="alice", tenant="default", is_admin=False)
# cancels the services' replica jobs: a member may cancel only jobs they submitted
TINA = Principal(name="tina", tenant="default", role=Role.TENANT_ADMIN)
PROMPTLY_S = 10.0  # far more than a cancel takes; far less than a store's lock wait (30 s)


class HangingProbe:
    """Replicas answer ready, except that once ``hang`` is set, a probe of an address
    containing ``hang`` blocks until ``release`` is set (``entered`` says it began)."""

    def __init__(self) -> None:
        self.hang: str | None = None
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, address: str, path: str) -> bool:
        if self.hang is not None and self.hang in address:
            self.entered.set()
            self.release.wait(120)
        return True


def service_doc(name: str) -> dict[str, Any]:
    spec = {"model": {"name": "tiny", "storageUri": "file:///models/tiny"}, "resources": {"gpu": 1}}
    return {"apiVersion": "kiban/v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def replica_of(platform: Platform, service: str) -> str:
    with platform.sessions() as session:
        query = (
            select(Job.id)
            .join(ServiceReplica, ServiceReplica.job_id == Job.id)
            .join(ServiceRow, ServiceRow.id == ServiceReplica.service_id)
            .where(ServiceRow.name == service, Job.state == "Running")
        )
        return session.scalars(query).one()


def cancel(platform: Platform, job_id: str) -> str:
    """A user's cancel, in a transaction of its own; the job's state after it."""
    with platform.sessions() as session:
        job = jobs.cancel(session, TINA, job_id, platform.clock.now())
        session.commit()
        return job.state


def test_a_hanging_readiness_probe_holds_no_lock_on_the_jobs(platform: Platform) -> None:
    probe = HangingProbe()
    platform.services.probe = probe
    platform.services.gather_timeout_s = 120  # the pass waits for the probe as long as it hangs
    with platform.sessions() as session:
        for name in ("chat", "slow"):  # reconciled in this order
            serving.apply(session, ALICE, service_doc(name), facts=platform.facts, at=0.0)
        session.commit()
    for _ in range(3):
        platform.services.run_once()
        platform.loop.run_once()
    platform.services.run_once()
    chat, slow = replica_of(platform, "chat"), replica_of(platform, "slow")
    # "chat" is deleted: the next pass cancels its replica before it probes "slow"'s, which hangs.
    with platform.sessions() as session:
        serving.delete(session, ALICE, "chat", platform.clock.now())
        session.commit()
        # Rewritten after "chat", "slow" stays after it even in a store's unordered scan
        # (PostgreSQL's writes a row's new version at the end).
        touch = update(ServiceRow).where(ServiceRow.name == "slow")
        session.execute(touch.values(canary_percent=ServiceRow.canary_percent))
        session.commit()
    probe.hang = "slow"
    with ThreadPoolExecutor(2) as pool:
        reconciling = pool.submit(platform.services.run_once)
        try:
            assert probe.entered.wait(PROMPTLY_S), "the pass never probed the slow replica"
            # A user's cancel, then the control loop settling the stopping jobs (each locked in
            # a transaction of its own): of the service before the hanging one, and its own.
            assert pool.submit(cancel, platform, chat).result(timeout=PROMPTLY_S) == "Stopping"
            assert pool.submit(cancel, platform, slow).result(timeout=PROMPTLY_S) == "Stopping"
            settling = pool.submit(platform.loop.settle, platform.clock.now())
            settling.result(timeout=PROMPTLY_S)
            assert not reconciling.done()  # all that while, the probe hung
        finally:
            probe.release.set()
        reconciling.result(timeout=PROMPTLY_S)
    # The pass applied its plan after the cancels, without undoing them.
    with platform.sessions() as session:
        states = {j.id: (j.state, j.stop_intent) for j in session.scalars(select(Job))}
    assert states[chat] in (("Stopping", "cancel"), ("Cancelled", "cancel"))
    assert states[slow] in (("Stopping", "cancel"), ("Cancelled", "cancel"))


class RollingBack:
    """Replicas answer ready; the first probe of the canary's replica rolls the canary back
    first, in a transaction of its own, as a user may while the pass probes."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.canary: str | None = None

    def __call__(self, address: str, path: str) -> bool:
        if self.canary is not None and address.startswith(self.canary):
            self.canary = None
            with self.platform.sessions() as session:
                serving.rollback(session, ALICE, "chat", self.platform.clock.now())
                session.commit()
        return True


def test_a_rollback_during_the_probes_wins_over_the_promotion_the_pass_planned(
    platform: Platform,
) -> None:
    probe = RollingBack(platform)
    platform.services.probe = probe

    def settle() -> None:
        for _ in range(3):
            platform.services.run_once()
            platform.loop.run_once()

    with platform.sessions() as session:
        serving.apply(session, ALICE, service_doc("chat"), facts=platform.facts, at=0.0)
        session.commit()
    settle()
    canary = service_doc("chat")
    canary["spec"].update(
        canaryTrafficPercent=100, model={**canary["spec"]["model"], "args": ["-v"]}
    )
    with platform.sessions() as session:
        serving.apply(session, ALICE, canary, facts=platform.facts, at=0.0)
        session.commit()
    platform.services.run_once()  # the canary's replica is made...
    platform.loop.run_once()  # ... and runs; the next pass would find it ready and promote it
    probe.canary = "chat-00002-0"
    platform.services.run_once()
    assert probe.canary is None, "the canary's replica was not probed"
    with platform.sessions() as session:
        service = session.scalars(select(ServiceRow)).one()
        assert (service.stable_revision, service.canary_revision) == (1, None)
        revisions = session.scalars(select(ServiceRevision).order_by(ServiceRevision.number))
        assert [r.state for r in revisions] == ["Ready", "Retired"]
        promoted = session.scalars(select(Event.message).where(Event.reason == "Promoted"))
        assert [m for m in promoted if "chat-00002" in m] == []
    platform.services.run_once()  # the next pass sees the rollback: the canary's replica goes
    with platform.sessions() as session:
        replica = session.scalars(select(Job).where(Job.name == "chat-00002-0")).one()
        assert replica.state in ("Stopping", "Cancelled")
