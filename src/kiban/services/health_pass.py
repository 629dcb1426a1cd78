"""The control loop's health step, each pass: nodes whose agent went silent for
``agentTimeoutSeconds`` get their conditions Unknown (``AgentNotReporting``) and the rules
applied to them; pending drains requeue the jobs of their node (again after a restart: a
requeue is idempotent), keeping the jobs' submit time and ``backoffLimit``
(``StopIntent.REQUEUE`` counts no attempt); jobs' exclusions of nodes that have since passed
K healthy checks end (``kiban.services.exclusions``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.remediation import HealthPolicyDecl
from kiban.executors.base import NodeTaints
from kiban.health.conditions import CheckType, Condition, ConditionStatus
from kiban.services.exclusions import end_healthy_exclusions
from kiban.services.node_health import AGENT_NOT_REPORTING, store_conditions
from kiban.services.policy import PolicyCache
from kiban.services.remediation import Requeue, carry_out, fail_orphans, remediate, run_drains
from kiban.store.models_nodes import Node, NodeCondition


def mark_stale_agents(session: Session, policy: HealthPolicyDecl, now: float) -> list[str]:
    """Conditions of nodes whose agent has not reported for ``agentTimeoutSeconds`` become
    Unknown (``AgentNotReporting``); a node whose agent never reported is left as it is. The
    nodes changed; the caller commits."""
    cutoff = now - policy.agent_timeout_seconds
    rows = session.execute(
        select(NodeCondition, Node.agent_reported_at)
        .join(Node, Node.name == NodeCondition.node)
        .where(
            Node.agent_reported_at.is_not(None),
            Node.agent_reported_at < cutoff,
            NodeCondition.reason != AGENT_NOT_REPORTING,
        )
    ).all()
    stale: dict[str, list[Condition]] = {}
    for row, reported_at in rows:
        silent = now - (reported_at or 0.0)
        stale.setdefault(row.node, []).append(
            Condition(
                type=CheckType(row.type),
                status=ConditionStatus.UNKNOWN,
                reason=AGENT_NOT_REPORTING,
                message=f"the node agent has not reported for {silent:.0f}s",
                last_transition_time=now,
            )
        )
    for node, conditions in stale.items():
        store_conditions(session, node, conditions, now)
    return sorted(stale)


DRAIN_SWEEP_S = 30.0
"""Pending drains are looked for at least this often, besides when one is known to be recorded
(``drain_recorded``) and at the first pass (a drain left pending by a control plane that
stopped): the store is not read for them on every pass."""


EXCLUSIONS_EVERY_S = 5.0
"""How often jobs' exclusions are looked at for nodes healthy again: an exclusion ends at most
this long after its node's K-th healthy check (agents check every 30 s by default)."""


class HealthPass:
    """The control loop's health step: stale agents (at most every ``stale_every_s``), then
    pending drains when one was recorded (``drain_recorded``), at the first pass, and every
    ``drain_sweep_s``. The loop makes one and calls it each pass."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        requeue: Requeue,
        taints: NodeTaints | None,
        clock: Callable[[], float],
        stale_every_s: float = 1.0,
        drain_sweep_s: float = DRAIN_SWEEP_S,
        exclusions_every_s: float = EXCLUSIONS_EVERY_S,
    ) -> None:
        self.sessions = sessions
        self.requeue = requeue
        self.taints = taints
        self.clock = clock
        self.stale_every_s = stale_every_s
        self.drain_sweep_s = drain_sweep_s
        self._last_stale = float("-inf")
        self._last_drains = float("-inf")
        self.exclusions_every_s = exclusions_every_s
        self._last_exclusions = float("-inf")
        self._drains_due = threading.Event()
        self._started = clock()
        self._orphans_checked = False

    def drain_recorded(self) -> None:
        """A drain was recorded (by a report's remediation): the next pass requeues its jobs."""
        self._drains_due.set()

    def __call__(self, policies: PolicyCache) -> None:
        now = self.clock()
        if not self._orphans_checked:
            with self.sessions() as session:
                fail_orphans(session, self._started, now)
                session.commit()
            self._orphans_checked = True
        if now - self._last_stale >= self.stale_every_s:
            self._last_stale = now
            with self.sessions() as session:
                policy = policies.get(session).health
                stale = mark_stale_agents(session, policy, now)
                session.commit()
                done = remediate(session, policy, stale, now) if stale else None
            if done is not None and done.drains:
                self._drains_due.set()
            if done is not None and done.work:  # hooks may take long: not on the loop's thread
                args = (self.sessions, done.work, self.taints, self.clock)
                threading.Thread(target=carry_out, args=args, daemon=True).start()
        if now - self._last_exclusions >= self.exclusions_every_s:
            self._last_exclusions = now
            with self.sessions() as session:
                end_healthy_exclusions(session, policies.get(session).health, now)
                session.commit()
        if self._drains_due.is_set() or now - self._last_drains >= self.drain_sweep_s:
            self._drains_due.clear()  # before reading: a drain recorded meanwhile is seen next
            self._last_drains = now
            run_drains(self.sessions, self.requeue, now)
