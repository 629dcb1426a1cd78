"""Preflight of admitted multi-node gangs, between the scheduler's decision and the launch.

1. Read what the store knows of the placed nodes' agents and their recent conditions (a short
   read, no transaction left open).
2. Ask the agents of the nodes not heard from within ``fresh_s`` to check now
   (``POST http://{agent}/check?node=NAME``), all at once, outside any transaction.
3. Judge each node (``kiban.health.preflight``; a node whose agent did not answer as
   ``health.preflight.unreachableAgent`` says: its last report older than
   ``health.agentTimeoutSeconds`` fails it); a gang with a failing node is not launched:
   the node joins the job's exclusions, a ``PreflightFailed`` event names it and the condition,
   and the job stays Pending with its submit time and priority, so its place in line is kept;
   the next pass places the gang again without that node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.event_reasons import JobEventReason
from kiban.domain.states import JobState
from kiban.health.conditions import CheckType, Condition, ConditionStatus
from kiban.health.preflight import (
    NodeState,
    NodeVerdict,
    PreflightSettings,
    Source,
    describe_failure,
    exclusions_after,
    failure_reason,
    judge,
    judge_unreachable,
    needs_preflight,
    to_ask,
)
from kiban.health.report import NodeHealthReport
from kiban.scheduler.decisions import Admit
from kiban.services.events import record_for_job
from kiban.services.exclusions import healthy_baselines
from kiban.services.policy import PolicyCache
from kiban.store.models import Job
from kiban.store.models_nodes import Node, NodeCondition

log = logging.getLogger("kiban.control")

AskAgent = Callable[[str, str, float], Sequence[Condition]]
"""Ask the agent at an address to check a node now, within a timeout: its conditions."""


def ask_agent(address: str, node: str, timeout_s: float) -> Sequence[Condition]:
    """``POST http://{address}/check?node=NAME``: the conditions of the report it answers."""
    response = httpx.post(f"http://{address}/check", params={"node": node}, timeout=timeout_s)
    response.raise_for_status()
    return NodeHealthReport.model_validate_json(response.content).conditions


def stored_conditions(rows: Sequence[NodeCondition]) -> list[Condition]:
    """Conditions from their rows (a type or status this kiban does not know is left out)."""
    known = []
    for row in rows:
        try:
            known.append(
                Condition(
                    type=CheckType(row.type),
                    status=ConditionStatus(row.status),
                    reason=row.reason[:128],
                    message=row.message,
                    last_transition_time=row.last_transition_time,
                )
            )
        except (ValueError, ValidationError):
            continue
    return known


class Preflight:
    """Checks the placed nodes of admitted gangs; excludes failing nodes from their jobs."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        settings: PreflightSettings | None = None,
        ask: AskAgent = ask_agent,
    ) -> None:
        self.sessions = sessions
        self.settings = settings or PreflightSettings()
        self.ask = ask
        self.policies = PolicyCache()  # health.preflight and health.agentTimeoutSeconds

    def screen(self, admits: Sequence[Admit], now: float) -> tuple[list[Admit], list[str]]:
        """The admits to launch, and the ids of the jobs held back (their nodes excluded)."""
        checked = [
            a for a in admits if needs_preflight((p.node for p in a.placements), self.settings)
        ]
        if not checked:
            return list(admits), []
        nodes = sorted({p.node for a in checked for p in a.placements})
        verdicts = self.verdicts(nodes, now)
        held: dict[str, list[NodeVerdict]] = {}
        for admit in checked:
            placed = sorted({p.node for p in admit.placements})
            failed = [verdicts[n] for n in placed if not verdicts[n].passed]
            if failed:
                held[admit.job_id] = failed
            notes = [f"{n}: {verdicts[n].note}" for n in placed if verdicts[n].note]
            if notes:
                log.info("preflight of job %s: %s", admit.job_id, "; ".join(notes))
        if held:
            self._exclude(held, now)
        return [a for a in admits if a.job_id not in held], sorted(held)

    def verdicts(self, nodes: Sequence[str], now: float) -> dict[str, NodeVerdict]:
        """Each node's verdict: from its fresh stored conditions, its agent, or a pass."""
        with self.sessions() as session:
            states = [
                NodeState(name, address or "", reported)
                for name, address, reported in session.execute(
                    select(Node.name, Node.agent_address, Node.agent_reported_at).where(
                        Node.name.in_(nodes)
                    )
                ).all()
            ]
            asked = set(to_ask(states, now, self.settings))
            health = self.policies.get(session).health
            stored: dict[str, list[NodeCondition]] = {}
            for row in session.scalars(  # of asked nodes too: in case their agent is silent
                select(NodeCondition).where(
                    NodeCondition.node.in_([s.name for s in states if s.agent_address])
                )
            ):
                stored.setdefault(row.node, []).append(row)
        # The session is closed: the agents are asked outside any transaction.
        answers = self._ask_all([s for s in states if s.name in asked])
        result: dict[str, NodeVerdict] = {}
        for state in states:
            if state.name in asked:
                answer = answers[state.name]
                if isinstance(answer, Exception):
                    result[state.name] = judge_unreachable(
                        state,
                        str(answer) or type(answer).__name__,
                        stored_conditions(stored.get(state.name, [])),
                        now,
                        health.agent_timeout_seconds,
                        health.preflight.unreachable_agent,
                    )
                else:
                    result[state.name] = judge(state.name, Source.AGENT, answer)
            elif state.agent_address:
                conditions = stored_conditions(stored.get(state.name, []))
                result[state.name] = judge(state.name, Source.STORED, conditions)
            else:
                note = "no node agent: not checked"
                result[state.name] = NodeVerdict(state.name, Source.NO_AGENT, note=note)
        for name in nodes:  # a node gone from the store since the snapshot: nothing to check
            result.setdefault(name, NodeVerdict(name, Source.NO_AGENT, note="node not stored"))
        return result

    def _ask_all(self, states: Sequence[NodeState]) -> dict[str, Sequence[Condition] | Exception]:
        if not states:
            return {}
        timeout = self.settings.timeout_s

        def one(state: NodeState) -> Sequence[Condition] | Exception:
            try:
                return self.ask(state.agent_address, state.name, timeout)
            except (httpx.HTTPError, ValidationError, ValueError) as exc:
                return exc

        with ThreadPoolExecutor(min(len(states), 16), thread_name_prefix="kiban-preflight") as pool:
            return dict(zip((s.name for s in states), pool.map(one, states), strict=True))

    def exclude(self, job_id: str, nodes: Mapping[str, str], now: float) -> None:
        """Keep a job off ``nodes`` (node -> why) for ``exclude_for_s``, or until the node has
        passed K healthy checks since (``kiban.services.exclusions``): its retry after a node
        failed under it lands elsewhere. Its own short transaction."""
        with self.sessions() as session:
            job = session.get(Job, job_id, with_for_update=True)
            if job is not None:
                job.excluded_nodes = exclusions_after(
                    job.excluded_nodes,
                    nodes,
                    now,
                    self.settings,
                    healthy_baselines(session, nodes),
                )
                session.commit()

    def _exclude(self, held: dict[str, list[NodeVerdict]], now: float) -> None:
        """Add the failed nodes to each held job's exclusions, with an event per node."""
        with self.sessions() as session:
            jobs = session.scalars(
                select(Job).where(Job.id.in_(sorted(held))).with_for_update()
            ).all()
            healthy = healthy_baselines(session, {v.node for f in held.values() for v in f})
            for job in jobs:
                if job.state != JobState.PENDING.value:
                    continue  # cancelled meanwhile: nothing to place again
                failed = held[job.id]
                job.excluded_nodes = exclusions_after(
                    job.excluded_nodes,
                    {v.node: failure_reason(v) for v in failed},
                    now,
                    self.settings,
                    healthy,
                )
                for verdict in failed:
                    record_for_job(
                        session,
                        job,
                        JobEventReason.PREFLIGHT_FAILED,
                        f"preflight failed on {describe_failure(verdict)}; the node is excluded "
                        f"from this job for {self.settings.exclude_for_s:g} s and the gang is "
                        "placed again",
                        now,
                        warning=True,
                    )
            session.commit()
