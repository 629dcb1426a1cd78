"""Jobs' node exclusions in the store: what an exclusion records of its node when it begins,
and the early end of those whose node has since passed K healthy checks
(``kiban.health.exclusions``), each with an ``ExclusionEnded`` event on the job. The time bound
(``until``) is read where placements are made (``kiban.control.snapshot_builder``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.domain.event_reasons import JobEventReason
from kiban.domain.remediation import HealthPolicyDecl
from kiban.domain.states import TERMINAL
from kiban.health.exclusions import ConditionStreak, end_healthy, ends_when_healthy, healthy_streaks
from kiban.services.events import record_for_job
from kiban.store.models import Job
from kiban.store.models_nodes import NodeCondition

log = logging.getLogger("kiban.health")


def condition_streaks(session: Session, nodes: Iterable[str]) -> dict[str, list[ConditionStreak]]:
    """The stored conditions of ``nodes``, with their streaks."""
    found: dict[str, list[ConditionStreak]] = {}
    rows = session.execute(
        select(
            NodeCondition.node,
            NodeCondition.type,
            NodeCondition.status,
            NodeCondition.streak,
            NodeCondition.last_transition_time,
        ).where(NodeCondition.node.in_(sorted(set(nodes))))
    )
    for node, kind, status, streak, since in rows.all():
        found.setdefault(node, []).append(ConditionStreak(kind, status, streak, since))
    return found


def healthy_baselines(session: Session, nodes: Iterable[str]) -> dict[str, dict[str, int]]:
    """What a new exclusion of each of ``nodes`` records: its healthy checks' streaks now."""
    return {node: healthy_streaks(c) for node, c in condition_streaks(session, nodes).items()}


def end_healthy_exclusions(
    session: Session, policy: HealthPolicyDecl, now: float
) -> list[tuple[str, str]]:
    """End the exclusions, of unended jobs, whose node has passed
    ``returnToService.healthyChecks`` consecutive healthy checks since the exclusion began;
    ``(job, node)`` of each ended. Not committed."""
    ended_states = [s.value for s in TERMINAL]
    candidates = [
        job_id
        for job_id, entries in session.execute(
            select(Job.id, Job.excluded_nodes).where(
                Job.excluded_nodes.is_not(None), Job.state.not_in(ended_states)
            )
        ).all()
        if any(ends_when_healthy(e) and float(e.get("until", 0.0)) > now for e in entries or ())
    ]
    if not candidates:
        return []
    required = policy.return_to_service.healthy_checks
    done: list[tuple[str, str]] = []
    for job_id in sorted(candidates):
        job = session.get(Job, job_id, with_for_update=True)
        if job is None or not job.excluded_nodes:
            continue
        nodes = [str(e.get("node", "")) for e in job.excluded_nodes]
        kept, ended = end_healthy(job.excluded_nodes, condition_streaks(session, nodes), required)
        if not ended:
            continue
        job.excluded_nodes = kept
        for end in ended:
            message = (
                f"node {end.node} passed {end.checks} consecutive healthy checks since it was "
                f"excluded (returnToService.healthyChecks: {required}): this job may run there "
                "again"
            )
            record_for_job(session, job, JobEventReason.EXCLUSION_ENDED, message, now)
            log.info("job %s: %s", job.id, message)
            done.append((job.id, end.node))
    return done
