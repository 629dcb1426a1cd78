"""The epilogue check: a job that failed on a node that saw a new Xid or ECC event while it
ran cordons that node pending a check (``cordon_source="remediation"``), with an
``EpilogueCheck`` event on the job naming the node and the event; the node's next healthy
agent report after the cordon returns it to service.

A small stand-in for remedy's return to service (``services/node_health``), which the lead
merges with it: both record ``RemediationAction`` rows, this one with rule ``epilogue``.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.event_reasons import JobEventReason
from kiban.domain.states import JobState
from kiban.health.epilogue import (
    EPILOGUE_CHECKS,
    EPILOGUE_RULE,
    ConditionChange,
    findings,
    may_return,
)
from kiban.health.remediation import CordonSource
from kiban.services import events
from kiban.services.node_health import stored_reading
from kiban.services.nodes import set_cordon
from kiban.store.models import Job, Replica
from kiban.store.models_nodes import (
    Node,
    NodeCondition,
    NodeConditionChange,
    NodeReadingRow,
    RemediationAction,
)


def check_failed_job(session: Session, job: Job, at: float) -> list[str]:
    """Cordon the nodes of the job's last attempt that saw a new Xid or ECC event while it
    ran; the nodes cordoned now. Not committed."""
    nodes = sorted(
        set(
            session.scalars(
                select(Replica.node).where(Replica.job_id == job.id, Replica.attempt == job.attempt)
            )
        )
    )
    if not nodes:
        return []
    started = job.started_at or job.admitted_at or job.submitted_at
    ended = job.finished_at or at
    changes = [
        ConditionChange(c.node, c.type, c.status, c.reason, c.message, c.at)
        for c in session.scalars(
            select(NodeConditionChange).where(
                NodeConditionChange.node.in_(nodes),
                NodeConditionChange.type.in_([c.value for c in EPILOGUE_CHECKS]),
                NodeConditionChange.at >= started,
                NodeConditionChange.at <= ended,
            )
        )
    ]
    readings = []
    for row in session.scalars(select(NodeReadingRow).where(NodeReadingRow.node.in_(nodes))):
        try:
            readings.append(stored_reading(row))
        except ValueError:
            continue
    cordoned = []
    for finding in findings(nodes, started, ended, changes, readings):
        events.record_for_job(
            session,
            job,
            JobEventReason.EPILOGUE_CHECK,
            f"job {job.id} failed on node {finding.node}, which saw {finding.what} while it "
            "ran: the node is cordoned until its next healthy check",
            at,
            warning=True,
        )
        node = session.get(Node, finding.node)
        if node is None:
            continue
        if not node.cordoned:
            set_cordon(node, CordonSource.REMEDIATION, at)
            events.record(
                session,
                kind="Node",
                name=node.name,
                reason="Cordoned",
                message=f"cordoned pending a check: job {job.id} failed here after {finding.what}",
                at=at,
                warning=True,
            )
            cordoned.append(node.name)
        session.add(
            RemediationAction(
                node=finding.node,
                action="cordon",
                check=finding.check.value,
                rule=EPILOGUE_RULE,
                reading=finding.what,
                outcome="done" if node.name in cordoned else "none",
                detail=f"job {job.id} failed"
                + ("" if node.name in cordoned else "; already cordoned"),
                at=at,
            )
        )
    return cordoned


def return_checked_nodes(session: Session, at: float) -> list[str]:
    """Uncordon the nodes the epilogue cordoned whose agent has since reported every check
    healthy; the nodes returned. Not committed."""
    returned = []
    for node in session.scalars(
        select(Node).where(
            Node.cordoned.is_(True), Node.cordon_source == CordonSource.REMEDIATION.value
        )
    ):
        last = session.scalars(
            select(RemediationAction)
            .where(RemediationAction.node == node.name)
            .order_by(RemediationAction.id.desc())
            .limit(1)
        ).first()
        if last is None or last.rule != EPILOGUE_RULE or last.action != "cordon":
            continue  # cordoned by remedy's rules: theirs to lift
        conditions = session.execute(
            select(NodeCondition.type, NodeCondition.status).where(NodeCondition.node == node.name)
        ).all()
        if not may_return([(t, s) for t, s in conditions], node.agent_reported_at, last.at):
            continue
        set_cordon(node, CordonSource.NONE, at)
        events.record(
            session,
            kind="Node",
            name=node.name,
            reason="Uncordoned",
            message="its check after a failed job found it healthy: takes new work again",
            at=at,
        )
        session.add(
            RemediationAction(
                node=node.name,
                action="uncordon",
                check=last.check,
                rule=EPILOGUE_RULE,
                reading="every check healthy",
                outcome="done",
                detail="",
                at=at,
            )
        )
        returned.append(node.name)
    return returned


class Epilogue:
    """The control loop's hook: check jobs that failed since its last pass, and return the
    nodes it cordoned once they report healthy."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self._since: float | None = None

    def tick(self, now: float) -> bool:
        """One pass's part; True when it changed what nodes take work."""
        since, self._since = self._since, now
        with self.sessions() as session:
            changed = bool(return_checked_nodes(session, now))
            if since is not None:
                failed = session.scalars(
                    select(Job).where(
                        Job.state == JobState.FAILED.value,
                        Job.finished_at > since,
                        Job.finished_at <= now,
                    )
                ).all()
                for job in failed:
                    changed = bool(check_failed_job(session, job, now)) or changed
            session.commit()
        return changed
