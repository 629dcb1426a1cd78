"""Node health on the control plane, remediation out: the policy's rules applied to nodes.

``remediate`` runs the pure engine (``kiban.health.remediation``) on the nodes just reported,
one decision at a time against the circuit breaker's running count, under one lock so that
concurrent reports cannot pass the breaker together. What the store alone can do (cordon,
uncordon) is done in that transaction; what needs the executor, a process or the jobs (taint,
hook, drain's requeues) is recorded ``pending`` and carried out after the commit
(``carry_out``; drains by the control loop, ``run_drains``), its outcome recorded then. No
network call or subprocess runs with a transaction open.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.remediation import HealthPolicyDecl, RemediationRuleDecl
from kiban.domain.states import JobState
from kiban.executors.base import NodeTaints
from kiban.health.conditions import CheckType, ConditionStatus
from kiban.health.remediation import (
    Breaker,
    ConditionState,
    CordonSource,
    Decision,
    NodeHealth,
    Outcome,
    PastAction,
    RemediationKind,
    decide_batch,
)
from kiban.services import events
from kiban.services.node_health import NodeHealthEvent
from kiban.services.nodes import jobs_on_node, set_cordon
from kiban.store.models_nodes import Node, NodeCondition, RemediationAction

log = logging.getLogger("kiban.health")

ACTIONS_READ = 200  # a node's recent actions the engine sees (its episode is among them)
DETAIL_CHARS = 2000
_DECIDING = threading.Lock()  # decisions and their records, one report at a time

Requeue = Callable[[str, list[str]], None]
"""Stops a job so that it returns to its queue (job id, the nodes why): the control loop's."""


# -- deciding and applying -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Work:
    """A recorded pending action to carry out after the commit (a taint or a hook)."""

    action_id: int
    decision: Decision


@dataclass(frozen=True, slots=True)
class Remediation:
    """What ``remediate`` decided, and the taints and hooks left to carry out."""

    decisions: list[Decision]
    work: list[Work]

    @property
    def drains(self) -> bool:
        """A drain was recorded: its requeues are the control loop's next pass's."""
        return any(
            d.kind is RemediationKind.DRAIN and d.outcome is Outcome.PENDING for d in self.decisions
        )


def remediate(
    session: Session, policy: HealthPolicyDecl, names: Sequence[str], now: float
) -> Remediation:
    """Decide and record the rules' actions for these nodes; commits. The taints and hooks are
    to be carried out (``carry_out``) once no transaction is open; pending drains are the
    control loop's (``run_drains``)."""
    with _DECIDING:
        session.commit()  # decide on what is stored now, read in a transaction of its own
        known = [session.get(Node, name) for name in names]
        nodes = [node for node in known if node is not None]
        breaker = _breaker(session, policy, now)
        decisions = decide_batch([_node_health(session, n) for n in nodes], policy, breaker, now)
        by_name = {n.name: n for n in nodes}
        work: list[Work] = []
        for decision in decisions:
            action = _apply(session, by_name[decision.node], decision, now)
            if decision.outcome is Outcome.PENDING and decision.kind in (
                RemediationKind.TAINT,
                RemediationKind.HOOK,
            ):
                work.append(Work(action.id, decision))
        session.commit()
    return Remediation(decisions, work)


def _breaker(session: Session, policy: HealthPolicyDecl, now: float) -> Breaker:
    size = session.scalar(select(func.count()).select_from(Node)) or 0
    breaker = Breaker(policy.circuit_breaker, size)
    start = now - policy.circuit_breaker.window_seconds
    disruptive = [k.value for k in RemediationKind if k.disruptive]
    rows = session.execute(
        select(RemediationAction.node, func.max(RemediationAction.at))
        .where(
            RemediationAction.at > start,
            RemediationAction.action.in_(disruptive),
            RemediationAction.outcome.in_([Outcome.DONE.value, Outcome.PENDING.value]),
        )
        .group_by(RemediationAction.node)
    )
    for node, at in rows.all():
        breaker.record(node, at)
    return breaker


def breaker_open(session: Session, policy: HealthPolicyDecl, now: float) -> bool:
    """Whether the circuit breaker stops acting on another node now."""
    return _breaker(session, policy, now).is_open(now)


def _node_health(session: Session, node: Node) -> NodeHealth:
    conditions = {
        CheckType(row.type): ConditionState(
            CheckType(row.type),
            ConditionStatus(row.status),
            row.streak,
            row.last_transition_time,
            row.message,
        )
        for row in session.scalars(select(NodeCondition).where(NodeCondition.node == node.name))
        if row.type in CheckType.__members__.values()
    }
    rows = session.scalars(
        select(RemediationAction)
        .where(RemediationAction.node == node.name)
        .order_by(RemediationAction.id.desc())
        .limit(ACTIONS_READ)
    ).all()
    actions = tuple(
        PastAction(
            RemediationKind(row.action),
            row.rule,
            CheckType(row.check) if row.check in CheckType.__members__.values() else None,
            Outcome(row.outcome),
            row.at,
        )
        for row in reversed(rows)
    )
    source = CordonSource(node.cordon_source) if node.cordoned else CordonSource.NONE
    if node.cordoned and source is CordonSource.NONE:
        source = CordonSource.ADMIN  # cordoned before sources were recorded
    return NodeHealth(node.name, conditions, source, actions)


def _apply(session: Session, node: Node, decision: Decision, now: float) -> RemediationAction:
    action = RemediationAction(
        node=node.name,
        action=decision.kind.value,
        check=decision.check.value if decision.check is not None else "",
        rule=decision.rule,
        reading=decision.reading,
        outcome=decision.outcome.value,
        detail=decision.detail[:DETAIL_CHARS],
        at=now,
    )
    session.add(action)
    if decision.kind.takes_out and decision.outcome is not Outcome.SUPPRESSED:
        if not node.cordoned:
            set_cordon(node, CordonSource.REMEDIATION, now)
    elif decision.kind is RemediationKind.UNCORDON:
        set_cordon(node, CordonSource.NONE, now)
    if decision.outcome is Outcome.SUPPRESSED:
        reason, warning = NodeHealthEvent.REMEDIATION_SUPPRESSED, True
    elif decision.kind is RemediationKind.UNCORDON:
        reason, warning = NodeHealthEvent.RETURNED_TO_SERVICE, False
    else:
        reason, warning = NodeHealthEvent.REMEDIATION, decision.kind is not RemediationKind.NONE
    events.record(
        session,
        kind="Node",
        name=node.name,
        reason=reason,
        message=describe(decision),
        at=now,
        warning=warning,
    )
    session.flush()  # the action's id, for its outcome later
    return action


def describe(decision: Decision, outcome: Outcome | None = None) -> str:
    """An action's event message: the action, the rule, the check, the reading, the outcome."""
    check = decision.check.value if decision.check is not None else "-"
    reading = f"; read: {decision.reading}" if decision.reading else ""
    said = (outcome or decision.outcome).value
    return (
        f"{decision.kind} by rule {decision.rule} (check {check}{reading}): {said}; "
        f"{decision.detail}"
    )


# -- carrying out what needs the world -----------------------------------------------------------
def carry_out(
    sessions: sessionmaker[Session],
    work: Sequence[Work],
    taints: NodeTaints | None,
    clock: Callable[[], float],
) -> None:
    """Run the pending taints and hooks (no transaction open), then record each outcome."""
    for item in work:
        outcome, detail = _run(item.decision, taints)
        with sessions() as session:
            finish(session, item.action_id, item.decision, outcome, detail, clock())
            session.commit()


def _run(decision: Decision, taints: NodeTaints | None) -> tuple[Outcome, str]:
    rule = decision.decl
    if rule is None:
        return Outcome.FAILED, "the rule is gone"
    if decision.kind is RemediationKind.TAINT:
        return _taint(decision.node, rule, taints)
    return _hook(decision, rule)


def _taint(node: str, rule: RemediationRuleDecl, taints: NodeTaints | None) -> tuple[Outcome, str]:
    taint = rule.taint
    if taint is None:
        return Outcome.FAILED, "the rule has no taint"
    if taints is None:
        return Outcome.FAILED, "this executor does not offer node taints (Kubernetes does)"
    try:
        taints.taint_node(node, taint.key, taint.value, taint.effect.value)
    except Exception as exc:  # the API's refusal is the outcome, not a crash
        return Outcome.FAILED, f"could not taint node {node}: {exc}"
    return Outcome.DONE, f"tainted {taint.key}={taint.value}:{taint.effect}"


def _hook(decision: Decision, rule: RemediationRuleDecl) -> tuple[Outcome, str]:
    """The rule's command as an argument list (``{node}`` and ``{check}`` filled in), never a
    shell, cut off after its timeout."""
    check = decision.check.value if decision.check is not None else ""
    argv = [
        a.replace("{node}", decision.node).replace("{check}", check) for a in rule.command or []
    ]
    try:
        done = subprocess.run(  # an admin's argument list, no shell
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=rule.timeout_seconds,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Outcome.FAILED, f"{argv[0]} did not finish within {rule.timeout_seconds:g}s"
    except OSError as exc:
        return Outcome.FAILED, f"could not run {argv[0]}: {exc}"
    tail = (done.stdout + done.stderr).decode(errors="replace").strip()[-500:]
    if done.returncode != 0:
        return Outcome.FAILED, f"{argv[0]} exited with {done.returncode}: {tail}"
    return Outcome.DONE, f"{argv[0]} exited with 0" + (f": {tail}" if tail else "")


def finish(
    session: Session, action_id: int, decision: Decision, outcome: Outcome, detail: str, now: float
) -> None:
    """Record how a pending action ended, with an event of its node."""
    action = session.get(RemediationAction, action_id)
    if action is None:
        return
    action.outcome = outcome.value
    action.detail = f"{action.detail}; {detail}"[:DETAIL_CHARS]
    failed = outcome is Outcome.FAILED
    events.record(
        session,
        kind="Node",
        name=decision.node,
        reason=NodeHealthEvent.REMEDIATION_FAILED if failed else NodeHealthEvent.REMEDIATION,
        message=describe(decision, outcome) + f"; {detail}",
        at=now,
        warning=True,
    )


# -- the control loop's part -------------------------------------------------------------------


def run_drains(sessions: sessionmaker[Session], requeue: Requeue, now: float) -> int:
    """Requeue the jobs on nodes with a pending drain, then mark the drain done; the number of
    jobs asked to stop. Safe to run again (after a restart mid-drain): a job already stopping
    or gone is left alone."""
    with sessions() as session:
        pending = [
            (row.id, row.node)
            for row in session.scalars(
                select(RemediationAction)
                .where(
                    RemediationAction.action == RemediationKind.DRAIN.value,
                    RemediationAction.outcome == Outcome.PENDING.value,
                )
                .order_by(RemediationAction.id)
            )
        ]
        jobs = {
            action_id: [
                job.id
                for job in jobs_on_node(session, node)
                if job.state in (JobState.RUNNING.value, JobState.ADMITTED.value)
            ]
            for action_id, node in pending
        }
    asked = 0
    for action_id, node in pending:
        for job_id in jobs[action_id]:
            requeue(job_id, [node])
            asked += 1
        with sessions() as session:
            action = session.get(RemediationAction, action_id, with_for_update=True)
            if action is None or action.outcome != Outcome.PENDING.value:
                continue
            action.outcome = Outcome.DONE.value
            requeued = ", ".join(jobs[action_id]) or "none running"
            action.detail = f"{action.detail}; jobs requeued: {requeued}"[:DETAIL_CHARS]
            events.record(
                session,
                kind="Node",
                name=node,
                reason=NodeHealthEvent.REMEDIATION,
                message=(
                    f"drain by rule {action.rule} (check {action.check}): done; jobs requeued "
                    f"keeping their submit time: {requeued}"
                ),
                at=now,
                warning=True,
            )
            session.commit()
    return asked


def fail_orphans(session: Session, before: float, now: float) -> int:
    """Taints and hooks left pending by a control plane that stopped (recorded before this one
    started) are recorded failed: whether they ran is not known, and a hook (a reboot, say) is
    not run twice on a guess. Drains are finished instead (``run_drains``). How many."""
    rows = session.scalars(
        select(RemediationAction).where(
            RemediationAction.outcome == Outcome.PENDING.value,
            RemediationAction.action.in_([RemediationKind.TAINT.value, RemediationKind.HOOK.value]),
            RemediationAction.at < before,
        )
    ).all()
    for row in rows:
        row.outcome = Outcome.FAILED.value
        why = "the control plane stopped before its outcome was recorded; not run again"
        row.detail = f"{row.detail}; {why}"[:DETAIL_CHARS]
        events.record(
            session,
            kind="Node",
            name=row.node,
            reason=NodeHealthEvent.REMEDIATION_FAILED,
            message=f"{row.action} by rule {row.rule} (check {row.check}): failed; {why}",
            at=now,
            warning=True,
        )
    return len(rows)
