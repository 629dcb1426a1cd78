"""Allreduce sweeps: measure the bus bandwidth of idle nodes with ordinary kiban jobs.

A sweep plans one job per topology block of idle nodes (``kiban.health.sweeps``) and submits
each as a kiban job in the system queue ``health-sweeps`` (tenant ``kiban-system``) at the
lowest priority class, ``health-sweep``, one torchrun replica per node of its block (the job's
other nodes excluded, so it lands on its block on every executor). When a sweep job succeeds
its result line (``kiban.health.allreduce``) is read from rank 0's log, each node's and the
block's busbw is stored against its baseline (the median of its past sweeps), and nodes below
``degraded_fraction`` of it get condition ``AllreduceDegraded`` True (else False).

The sweep queue is a scavenger queue: its jobs run on idle nodes only, and the scheduler
preempts one for any waiting job whose placement needs its nodes (``scheduler.preemption``),
and for no other. A sweep job so preempted is cancelled rather than requeued (the next sweep
measures its block again) with event ``SweepYielded`` naming the job that took its nodes.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.declarations import MAX_PRIORITY
from kiban.domain.event_reasons import JobEventReason
from kiban.domain.states import JobState
from kiban.domain.stop_intents import StopIntent
from kiban.executors.base import Executor, log_source
from kiban.health.allreduce import SweepResult, parse_result_line
from kiban.health.conditions import CheckType, Condition, ConditionStatus
from kiban.health.sweeps import (
    DEFAULT_DEGRADED_FRACTION,
    Block,
    SweepNode,
    SweepPlan,
    assess,
    block_busbw,
    block_level,
    node_busbw,
    plan_sweep,
)
from kiban.services import events, jobs, policy
from kiban.services.auth import Principal
from kiban.services.node_health import store_conditions
from kiban.store.models import Job, Replica
from kiban.store.models_nodes import AllreduceResult, Node

log = logging.getLogger("kiban.health")

SWEEP_TENANT = "kiban-system"
SWEEP_QUEUE = "health-sweeps"
SWEEP_PRIORITY_CLASS = "health-sweep"
BLOCK_LABEL = "kiban.io/sweep-block"
SYSTEM = Principal(name="kiban-health-sweep", tenant=None, is_admin=True)
MAX_LOG_BYTES = 4 << 20  # a sweep's rank 0 log read for its result line, at most


@dataclass(frozen=True, slots=True)
class SweepSettings:
    """How sweep jobs measure and judge: tensor size and timed iterations, how long a job
    may run, the fraction of its baseline below which a node is degraded, and the Python that
    runs the program on the nodes."""

    size_mb: float = 64.0
    iters: int = 20
    max_runtime_s: float = 600.0
    degraded_fraction: float = DEFAULT_DEGRADED_FRACTION
    python: str = field(default_factory=lambda: sys.executable)
    exclude_for_s: float = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class StartedSweep:
    """What ``POST /health/sweeps`` answers."""

    jobs: tuple[str, ...]
    plan: SweepPlan

    def as_json(self) -> dict[str, Any]:
        return {
            "jobs": list(self.jobs),
            "blocks": [list(b.nodes) for b in self.plan.blocks],
            "skipped": [
                {"block": list(s.nodes), "name": s.block, "why": s.why.value}
                for s in self.plan.skipped
            ],
        }


def ensure_sweep_queue(session: Session, at: float) -> None:
    """The system tenant, the lowest priority class and the sweep queue (a scavenger queue),
    added to the policy (one new version) when missing; a sweep queue declared before it was
    a scavenger one is made one."""
    record = policy.current_record(session)
    current = record.policy
    if current.is_scavenger(SWEEP_QUEUE) and current.priority_class(SWEEP_PRIORITY_CLASS):
        return
    policy.ensure_tenant(session, SWEEP_TENANT, at)
    document = dict(record.document)
    classes = list(
        document.get("priorityClasses")
        or [c.model_dump(by_alias=True, exclude_none=True) for c in current.priority_classes]
    )
    if current.priority_class(SWEEP_PRIORITY_CLASS) is None:
        lowest = min((c.value for c in current.priority_classes), default=0)
        classes.append({"name": SWEEP_PRIORITY_CLASS, "value": max(lowest - 1, -MAX_PRIORITY)})
    document["priorityClasses"] = classes
    if not current.is_scavenger(SWEEP_QUEUE):
        queues = [
            {**q, "scavenger": True} if q.get("name") == SWEEP_QUEUE else q
            for q in document.get("queues")
            or [q.model_dump(by_alias=True, exclude_none=True) for q in current.queues]
        ]
        if current.queue(SWEEP_QUEUE) is None:
            queues.append(
                {
                    "name": SWEEP_QUEUE,
                    "tenant": SWEEP_TENANT,
                    "strategy": "BestEffortFIFO",
                    "scavenger": True,
                }
            )
        document["queues"] = queues
    policy.apply_policy(session, document, actor="kiban health sweep", at=at)


def plan_from_store(session: Session) -> SweepPlan:
    """The sweep's blocks from the stored nodes: idle ones (no active replica of any job)."""
    current = policy.current_policy(session)
    busy = set(session.scalars(select(Replica.node).where(Replica.active.is_(True)).distinct()))
    nodes = [
        SweepNode(
            name=row.name,
            gpus=row.gpus,
            topology=current.topology_path(row.labels or {}),
            idle=row.name not in busy and not row.gpus_used_elsewhere,
            schedulable=row.healthy and not row.cordoned and not row.unschedulable_reason,
        )
        for row in session.scalars(select(Node).order_by(Node.name))
    ]
    return plan_sweep(nodes, block_level(current.topology_levels))


def sweep_manifest(block: Block, settings: SweepSettings) -> dict[str, Any]:
    """The job measuring one block: one torchrun replica per node of it, whole nodes."""
    command = [settings.python, "-m", "kiban.health.allreduce"]
    command += ["--size-mb", f"{settings.size_mb:g}", "--iters", str(settings.iters)]
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "allreduce-sweep", "labels": {BLOCK_LABEL: block.name}},
        "spec": {
            "queue": SWEEP_QUEUE,
            "priorityClass": SWEEP_PRIORITY_CLASS,
            "launcher": "torchrun",
            "maxRuntime": settings.max_runtime_s,
            "tasks": [
                {
                    "name": "rank",
                    "replicas": len(block.nodes),
                    "maxReplicasPerNode": 1,
                    "resources": {"gpu": block.gpus_per_node},
                    "command": command,
                }
            ],
        },
    }


def start_sweep(
    session: Session,
    principal: Principal,
    facts: jobs.ClusterFacts,
    settings: SweepSettings,
    at: float,
) -> StartedSweep:
    """Plan a sweep of the idle nodes and submit its jobs (admins only; not committed)."""
    principal.require_admin()
    ensure_sweep_queue(session, at)
    session.flush()
    plan = plan_from_store(session)
    all_nodes = list(session.scalars(select(Node.name)))
    submitted = []
    for block in plan.blocks:
        job = jobs.submit(session, SYSTEM, sweep_manifest(block, settings), facts=facts, at=at)
        others = sorted(set(all_nodes) - set(block.nodes))
        until = at + settings.exclude_for_s
        job.excluded_nodes = [
            {"node": n, "until": until, "reason": f"not in sweep block {block.name}"}
            for n in others
        ]
        submitted.append(job.id)
    return StartedSweep(tuple(submitted), plan)


def read_result(executor: Executor, job_id: str) -> SweepResult | None:
    """The result line of a sweep job's rank 0 log (None: none there)."""
    logs = log_source(executor)
    chunks: list[bytes] = []
    offset = 0
    while offset < MAX_LOG_BYTES:
        data, offset = logs.read_log(job_id, 0, offset, 256 * 1024)
        if not data:
            break
        chunks.append(data)
    return parse_result_line(b"".join(chunks).decode(errors="replace"))


def _past(session: Session, scope: str, name: str, limit: int = 50) -> list[float]:
    rows = session.scalars(
        select(AllreduceResult.busbw_gbps)
        .where(AllreduceResult.scope == scope, AllreduceResult.name == name)
        .order_by(AllreduceResult.id.desc())
        .limit(limit)
    )
    return list(rows)


def store_result(
    session: Session, job: Job, result: SweepResult, settings: SweepSettings, at: float
) -> list[AllreduceResult]:
    """Each node's and the block's figures against their baselines, and the nodes' condition
    ``AllreduceDegraded`` (True when the node or its block is degraded). Not committed."""
    block = ((job.spec.get("metadata") or {}).get("labels") or {}).get(BLOCK_LABEL, job.id)
    figures = node_busbw(result)
    members = sorted(figures)
    rows = []
    whole = assess(block_busbw(result), _past(session, "block", block), settings.degraded_fraction)
    rows.append(_row(job.id, "block", block, members, whole, at))
    for node, value in sorted(figures.items()):
        judged = assess(value, _past(session, "node", node), settings.degraded_fraction)
        rows.append(_row(job.id, "node", node, [node], judged, at))
        degraded = judged.degraded or whole.degraded
        worst = judged if judged.degraded or not whole.degraded else whole
        what = "its block's" if worst is whole else "its"
        message = (
            f"{what} allreduce busbw {worst.busbw_gbps:.3g} GB/s is {worst.fraction:.0%} of "
            f"the baseline {worst.baseline_gbps:.3g} GB/s (sweep job {job.id})"
        )
        set_allreduce_condition(session, node, degraded, message, at)
    session.add_all(rows)
    return rows


def _row(
    job_id: str, scope: str, name: str, nodes: list[str], a: Any, at: float
) -> AllreduceResult:
    return AllreduceResult(
        job_id=job_id,
        scope=scope,
        name=name,
        nodes=nodes,
        busbw_gbps=a.busbw_gbps,
        baseline_gbps=a.baseline_gbps,
        fraction=a.fraction,
        degraded=a.degraded,
        at=at,
    )


def set_allreduce_condition(
    session: Session, node: str, degraded: bool, message: str, at: float
) -> None:
    """Write the node's ``AllreduceDegraded`` condition the way agents' reports are kept
    (streak, history, an event on a change). Not committed."""
    condition = Condition(
        type=CheckType.ALLREDUCE_DEGRADED,
        status=ConditionStatus.TRUE if degraded else ConditionStatus.FALSE,
        reason="AllreduceBelowBaseline" if degraded else "AllreduceAtBaseline",
        message=message,
        last_transition_time=at,
    )
    store_conditions(session, node, [condition], at)


def collect(
    sessions: sessionmaker[Session],
    executor: Executor,
    settings: SweepSettings,
    at: float,
    without_result: set[str] | None = None,
) -> list[str]:
    """Store the results of sweep jobs that succeeded since the last collection; their ids.
    ``without_result`` collects the ids of those whose log had no result, not read again."""
    without_result = set() if without_result is None else without_result
    with sessions() as session:
        done = set(session.scalars(select(AllreduceResult.job_id).distinct()))
        finished = [
            job_id
            for job_id in session.scalars(
                select(Job.id).where(
                    Job.queue == SWEEP_QUEUE, Job.state == JobState.SUCCEEDED.value
                )
            )
            if job_id not in done and job_id not in without_result
        ]
    collected = []
    for job_id in finished:
        try:
            result = read_result(executor, job_id)  # outside any transaction
        except Exception:
            log.exception("could not read the log of sweep job %s", job_id)
            continue
        if result is None or not result.ranks:
            log.warning("sweep job %s succeeded without a result line in its log", job_id)
            without_result.add(job_id)
            continue
        with sessions() as session:
            job = session.get(Job, job_id)
            if job is None:
                continue
            store_result(session, job, result, settings, at)
            session.commit()
        collected.append(job_id)
    return collected


def latest_results(session: Session) -> dict[str, Any]:
    """``GET /health/sweeps``: the latest figures of every block and node."""
    newest = (
        select(func.max(AllreduceResult.id))
        .group_by(AllreduceResult.scope, AllreduceResult.name)
        .scalar_subquery()
    )
    rows = session.scalars(
        select(AllreduceResult).where(AllreduceResult.id.in_(newest)).order_by(AllreduceResult.name)
    )
    result: dict[str, list[dict[str, Any]]] = {"blocks": [], "nodes": []}
    for row in rows:
        entry = {
            "name": row.name,
            "nodes": list(row.nodes),
            "job": row.job_id,
            "busbw": row.busbw_gbps,
            "baseline": row.baseline_gbps,
            "fraction": row.fraction,
            "degraded": row.degraded,
            "at": row.at,
        }
        result["blocks" if row.scope == "block" else "nodes"].append(entry)
    return result


def give_way(session: Session, at: float) -> list[str]:
    """Cancel the sweep jobs the scheduler preempted (stopping for it, or back in their queue
    after it), each with event ``SweepYielded`` naming the job that took its nodes: a sweep
    interrupted is not resumed, the next sweep measures its block again. Their ids. Not
    committed."""
    preempted = session.scalars(
        select(Job)
        .where(
            Job.queue == SWEEP_QUEUE,
            Job.preempted_by.is_not(None),
            or_(
                Job.state == JobState.PENDING.value,
                and_(Job.state == JobState.STOPPING.value, Job.stop_intent == StopIntent.PREEMPT),
            ),
        )
        .order_by(Job.id)
    ).all()
    for job in preempted:
        jobs.stop_unended(session, job, f"cancelled by {SYSTEM.name}", at)
        events.record_for_job(
            session,
            job,
            JobEventReason.SWEEP_YIELDED,
            f"preempted by the scheduler for job {job.preempted_by}, which needs its nodes: "
            "a sweep runs on idle nodes only, and gives way to any work",
            at,
        )
    return [job.id for job in preempted]


class HealthSweeps:
    """The control loop's hook: start a sweep every ``every_s`` (None: only on demand) and
    collect the results of finished sweep jobs."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        executor: Executor,
        facts: Callable[[], jobs.ClusterFacts],
        settings: SweepSettings | None = None,
        every_s: float | None = None,
    ) -> None:
        self.sessions = sessions
        self.executor = executor
        self.facts = facts
        self.settings = settings or SweepSettings()
        self.every_s = every_s
        self._last_start: float | None = None
        self._without_result: set[str] = set()

    def start(self, at: float) -> StartedSweep:
        with self.sessions() as session:
            started = start_sweep(session, SYSTEM, self.facts(), self.settings, at)
            session.commit()
        self._last_start = at
        return started

    def tick(self, now: float) -> bool:
        """One pass's part: True when it submitted or cancelled sweep jobs (the pass should
        schedule)."""
        collect(self.sessions, self.executor, self.settings, now, self._without_result)
        with self.sessions() as session:
            yielded = give_way(session, now)
            session.commit()
        if yielded:
            return True
        if self.every_s is None:
            return False
        if self._last_start is None:
            self._last_start = now  # the first periodic sweep comes one interval after start
            return False
        if now - self._last_start < self.every_s:
            return False
        try:
            return bool(self.start(now).jobs)
        except Exception:
            log.exception("the periodic allreduce sweep could not start")
            self._last_start = now
            return False
