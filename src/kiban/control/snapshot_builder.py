"""Build the scheduler's immutable snapshot from the store."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.jobspec import JobSpec, task_demands
from kiban.domain.manifests import parse_job_manifest
from kiban.domain.states import JobState
from kiban.scheduler.attained_service import las_queues
from kiban.scheduler.node_match import excluding
from kiban.scheduler.reasons import ReasonCode
from kiban.scheduler.snapshot import (
    NO_EXTENDED,
    Extended,
    NodeView,
    PendingJob,
    QueueStrategy,
    QueueView,
    RunningIndex,
    RunningJob,
    RunningReplica,
    Snapshot,
    TaskDemand,
    TopologyRequest,
    extended_of,
    node_view,
)
from kiban.services.member_usage import member_standings
from kiban.services.quota_ledger import queue_view
from kiban.services.runtime_estimates import RuntimeEstimates, spec_features
from kiban.services.usage import standings
from kiban.store.models import Job, Queue, Replica
from kiban.store.models_nodes import Node


class SpecCache:
    """Parsed job specs by job id, so each cycle does not re-validate every pending job."""

    def __init__(self) -> None:
        self._specs: dict[str, JobSpec] = {}

    def get(self, job: Job) -> JobSpec:
        return self.get_by_id(job.id, lambda: job.spec)

    def get_by_id(self, job_id: str, load: Callable[[], dict[str, Any]]) -> JobSpec:
        spec = self._specs.get(job_id)
        if spec is None:
            spec = parse_job_manifest(load()).spec
            self._specs[job_id] = spec
        return spec

    def known(self, job_id: str) -> bool:
        return job_id in self._specs

    def forget(self, job_id: str) -> None:
        self._specs.pop(job_id, None)

    def load_missing(self, session: Session, job_ids: Iterable[str]) -> None:
        """Parse the specs of the jobs not cached yet, reading their documents in chunks."""
        unparsed = [job_id for job_id in job_ids if job_id not in self._specs]
        for start in range(0, len(unparsed), 500):
            chunk = unparsed[start : start + 500]
            for job_id, document in session.execute(
                select(Job.id, Job.spec).where(Job.id.in_(chunk))
            ).all():
                self.get_by_id(job_id, partial(dict, document))


@dataclass(frozen=True, slots=True)
class RecordedWait:
    """What the store already says about a pending job, so unchanged reasons are not rewritten."""

    tenant: str
    code: str | None
    message: str | None
    position: int | None
    cluster: int | None = None
    eta: float | None = None


def demands(spec: JobSpec, node_constraints: bool = False) -> tuple[TaskDemand, ...]:
    """What each task needs (``jobspec.task_demands``, also what submission checks)."""
    return task_demands(spec, node_constraints)


def active_exclusions(stored: list[dict[str, Any]] | None, now: float) -> frozenset[str]:
    """The nodes of a job's stored exclusions that still hold at ``now`` (``until`` ahead)."""
    if not stored:
        return frozenset()
    return frozenset(e["node"] for e in stored if float(e.get("until", 0.0)) > now)


def with_exclusions(
    tasks: tuple[TaskDemand, ...], excluded: frozenset[str]
) -> tuple[TaskDemand, ...]:
    """The tasks, each kept off the ``excluded`` nodes."""
    if not excluded:
        return tasks
    return tuple(replace(t, nodes=excluding(t.nodes, excluded)) for t in tasks)


class NodeViews:
    """The last view of each node, handed out again while the node is unchanged, so that the
    core's capacity cache (which compares views by identity) updates only changed nodes."""

    def __init__(self) -> None:
        self._last: dict[str, NodeView] = {}

    def reuse(self, view: NodeView) -> NodeView:
        last = self._last.get(view.name)
        if last is not None and last == view:
            return last
        self._last[view.name] = view
        return view


class PendingViews:
    """The core's view of each pending job of the last pass, made again only when its row or
    the policy changed: a pass over a full window re-reads its rows, not its specs."""

    def __init__(self) -> None:
        self._made_for: tuple[ClusterPolicy, bool] | None = None
        self._last: dict[str, tuple[tuple[Any, ...], PendingJob]] = {}
        self._next: dict[str, tuple[tuple[Any, ...], PendingJob]] = {}
        self.made = 0  # views made (not reused) by the last pass

    def begin(self, policy: ClusterPolicy, node_constraints: bool) -> None:
        """A new pass: the views of jobs it does not read again are dropped at its end."""
        made_for = self._made_for
        if made_for is None or made_for[0] is not policy or made_for[1] != node_constraints:
            self._made_for, self._last = (policy, node_constraints), {}
        self._next = {}
        self.made = 0

    def get(self, job_id: str, key: tuple[Any, ...]) -> PendingJob | None:
        found = self._last.get(job_id)
        if found is None or found[0] != key:
            return None
        self._next[job_id] = found
        return found[1]

    def put(self, job_id: str, key: tuple[Any, ...], view: PendingJob) -> PendingJob:
        self._next[job_id] = (key, view)
        self.made += 1
        return view

    def end(self) -> None:
        self._last, self._next = self._next, {}


def held_elsewhere(gpus: int, used: set[int], count: int) -> set[int]:
    """GPU ids to count as taken by work kiban did not start: the highest ``count`` of those
    kiban does not use (GPU ids are only kiban's bookkeeping; the device plugin picks devices)."""
    free = [i for i in range(gpus - 1, -1, -1) if i not in used]
    return set(free[:count])


def build_snapshot(
    session: Session,
    specs: SpecCache,
    now: float,
    recorded: dict[str, RecordedWait] | None = None,
    window: int = 256,
    policy: ClusterPolicy | None = None,
    views: NodeViews | None = None,
    node_constraints: bool = False,
    pending_views: PendingViews | None = None,
    estimates: RuntimeEstimates | None = None,
) -> Snapshot:
    """Nodes with what is free on them, queues with what they use, running and pending jobs.

    Only the first ``window`` pending jobs of each queue are in the snapshot; the others have no
    recorded reason, and readers say they wait in the queue's backlog (``awaiting_pass``).
    With ``estimates`` (brought up to date first), jobs with no maxRuntime carry their
    estimated run time, for backfill and forecasts.
    """
    policy = policy or ClusterPolicy()
    if estimates is not None:
        estimates.refresh(session, prune=True)
    node_rows = list(session.scalars(select(Node).order_by(Node.name)))
    flavor_of = {row.name: policy.flavor_of(row.labels or {}) for row in node_rows}
    running = _running_jobs(session, specs, policy, flavor_of, now, estimates)

    used_gpus: dict[str, set[int]] = {}
    used_cpu: dict[str, int] = {}
    used_memory: dict[str, int] = {}
    used_extended: dict[str, dict[str, int]] = {}
    queue_used: dict[str, dict[str, int]] = {}
    queue_extended: dict[str, dict[str, dict[str, int]]] = {}
    by_queue: dict[str, list[RunningJob]] = {}  # handed to the core: it need not regroup them
    for job in running:
        for r in job.replicas:
            used_gpus.setdefault(r.node, set()).update(r.gpu_ids)
            used_cpu[r.node] = used_cpu.get(r.node, 0) + r.cpu_millis
            used_memory[r.node] = used_memory.get(r.node, 0) + r.memory
            if r.extended:
                on_node = used_extended.setdefault(r.node, {})
                for name, amount in r.extended:
                    on_node[name] = on_node.get(name, 0) + amount
        per_flavor = queue_used.get(job.queue)
        if per_flavor is None:
            per_flavor = queue_used[job.queue] = {}
            by_queue[job.queue] = [job]
        else:
            by_queue[job.queue].append(job)
        for flavor, gpus in job.flavor_gpus.items():
            per_flavor[flavor] = per_flavor.get(flavor, 0) + gpus
        for flavor, held in job.flavor_extended.items():
            in_flavor = queue_extended.setdefault(job.queue, {}).setdefault(flavor, {})
            for name, amount in held:
                in_flavor[name] = in_flavor.get(name, 0) + amount
    stopping = tuple(job for job in running if job.preempted_by is not None)

    views = views or NodeViews()
    nodes = []
    for row in node_rows:
        reason = "" if row.healthy else (row.health_message or "unhealthy")
        if row.cordoned:
            reason = "cordoned"
        elif row.healthy and row.unschedulable_reason:
            reason = row.unschedulable_reason
        used_ids = used_gpus.get(row.name, set())
        if row.gpus_used_elsewhere:
            used_ids = used_ids | held_elsewhere(row.gpus, used_ids, row.gpus_used_elsewhere)
        nodes.append(
            views.reuse(
                node_view(
                    name=row.name,
                    gpus=row.gpus,
                    cpu_millis=row.cpu_millis,
                    memory=row.memory,
                    used_gpu_ids=used_ids,
                    used_cpu_millis=used_cpu.get(row.name, 0),
                    used_memory=used_memory.get(row.name, 0),
                    labels=row.labels or {},
                    schedulable=row.healthy and not row.cordoned and not row.unschedulable_reason,
                    unschedulable_reason=reason,
                    flavor=flavor_of[row.name],
                    topology=policy.topology_path(row.labels or {}),
                    extended=row.extended or None,
                    used_extended=used_extended.get(row.name),
                )
            )
        )
    queue_rows = list(session.scalars(select(Queue).order_by(Queue.name)))
    queues = tuple(
        queue_view(q, policy, queue_used.get(q.name), queue_extended.get(q.name), now=now)
        for q in queue_rows
    )
    pending = _pending_jobs(
        session,
        specs,
        policy,
        queues,
        recorded,
        window,
        node_constraints,
        pending_views or PendingViews(),
        now,
        estimates,
    )
    members, member_weights = member_standings(session, now, policy)
    return Snapshot(
        now=now,
        nodes=tuple(nodes),
        queues=queues,
        pending=pending,
        running=running,
        flavors=policy.flavor_views(),
        standings=standings(session, now, policy, queues),
        topology_levels=policy.topology_levels,
        running_index=RunningIndex(by_queue, stopping),
        member_standings=members,
        member_weights=member_weights,
    )


_HOLDING = (JobState.ADMITTED.value, JobState.RUNNING.value, JobState.STOPPING.value)


def _running_jobs(
    session: Session,
    specs: SpecCache,
    policy: ClusterPolicy,
    flavor_of: dict[str, str | None],
    now: float,
    estimates: RuntimeEstimates | None = None,
) -> tuple[RunningJob, ...]:
    replicas: dict[str, list[RunningReplica]] = {}
    tasks: dict[str, list[str]] = {}  # job -> each replica's task, in the same order
    attempt_start: dict[str, float] = {}  # job -> when its running attempt's replicas started
    for job_id, node, gpu_ids, cpu, memory, task, replica_start in session.execute(
        select(
            Replica.job_id,
            Replica.node,
            Replica.gpu_ids,
            Replica.cpu_millis,
            Replica.memory,
            Replica.task,
            Replica.started_at,
        )
        .where(Replica.active.is_(True))
        .order_by(Replica.job_id, Replica.rank)
    ).all():
        replicas.setdefault(job_id, []).append(
            RunningReplica(node, tuple(gpu_ids or ()), cpu, memory)
        )
        tasks.setdefault(job_id, []).append(task)
        if replica_start is not None:
            attempt_start[job_id] = min(attempt_start.get(job_id, replica_start), replica_start)
    if not replicas:
        return ()
    rows = session.execute(
        select(
            Job.id,
            Job.queue,
            Job.tenant,
            Job.priority,
            Job.submitted_at,
            Job.started_at,
            Job.admitted_at,
            Job.state,
            Job.stop_intent,
            Job.preempted_by,
            Job.last_checkpoint_at,
            Job.name,
            Job.submitted_by,
            Job.attempt,
        ).where(Job.state.in_(_HOLDING))
    ).all()
    specs.load_missing(session, [r.id for r in rows if r.id in replicas])
    las_name = QueueStrategy.LEAST_ATTAINED_SERVICE.value
    las = {q.name for q in policy.queues if q.strategy == las_name}
    attained = attained_service(
        session, [r.id for r in rows if r.queue in las and r.attempt > 1 and r.id in replicas]
    )
    result = []
    for row in rows:
        held = replicas.get(row.id)
        if not held:
            continue
        spec = specs.get_by_id(row.id, dict)
        held, flavor_extended = _with_extended(held, tasks[row.id], spec, flavor_of)
        started = row.started_at or row.admitted_at or now
        if row.id in attained:  # LAS counts this attempt's service from this attempt's start
            started = attempt_start.get(row.id, started)
        level = policy.priority(spec.priority_class)
        flavor_gpus: dict[str, int] = {}
        for r in held:
            flavor = flavor_of.get(r.node)
            if flavor is not None:
                flavor_gpus[flavor] = flavor_gpus.get(flavor, 0) + len(r.gpu_ids)
        stopping = row.state == JobState.STOPPING.value
        result.append(
            RunningJob(
                id=row.id,
                queue=row.queue,
                tenant=row.tenant,
                priority=row.priority,
                submitted_at=row.submitted_at,
                started_at=started,
                replicas=tuple(held),
                flavor_gpus=flavor_gpus,
                flavor_extended=flavor_extended,
                max_runtime=spec.max_runtime,
                last_progress_at=row.last_checkpoint_at,
                protected_until=started + (level.min_runtime_s if level else 0.0),
                preempted_by=row.preempted_by if stopping else None,
                stopping=stopping,
                member=row.submitted_by,
                estimated_runtime=estimated_runtime(estimates, row, spec, started, now),
                attained_service=attained.get(row.id, 0.0),
            )
        )
    return tuple(result)


def estimated_runtime(
    estimates: RuntimeEstimates | None,
    row: Any,  # a jobs row with its id, tenant, queue, name and submitted_by
    spec: JobSpec,
    started_at: float | None,
    now: float,
) -> float | None:
    """The run time to plan with for a job with no maxRuntime (None: it has one, or there is
    no estimate); a running job's grows once it nears or passes its estimate."""
    if estimates is None or spec.max_runtime is not None:
        return None
    features = estimates.features_of(
        row.id,
        lambda: spec_features(
            tenant=row.tenant, user=row.submitted_by, name=row.name, queue=row.queue, spec=spec
        ),
    )
    return estimates.planned_runtime(features, started_at, now)


def attained_service(session: Session, job_ids: Sequence[str]) -> dict[str, float]:
    """GPU-seconds the ended replicas of these jobs ran (their earlier attempts), for the
    order of LeastAttainedService queues. Asked only for jobs of such queues past their first
    attempt, through the index on the replicas' job id."""
    totals: dict[str, float] = {}
    for start in range(0, len(job_ids), 500):
        chunk = job_ids[start : start + 500]
        for job_id, started, finished, gpu_ids in session.execute(
            select(Replica.job_id, Replica.started_at, Replica.finished_at, Replica.gpu_ids).where(
                Replica.job_id.in_(chunk),
                Replica.active.is_(False),
                Replica.started_at.is_not(None),
                Replica.finished_at.is_not(None),
            )
        ).all():
            ran = max(finished - started, 0.0) * len(gpu_ids or ())
            totals[job_id] = totals.get(job_id, 0.0) + ran
    return totals


def _with_extended(
    held: list[RunningReplica],
    tasks: list[str],
    spec: JobSpec,
    flavor_of: dict[str, str | None],
) -> tuple[list[RunningReplica], dict[str, Extended]]:
    """The replicas with the extended resources their tasks ask for (from the stored spec), and
    what the job holds of them per flavor; the replicas as they are when it asks for none."""
    asked = {t.name: extended_of(t.resources.extended) for t in spec.tasks if t.resources.extended}
    if not asked:
        return held, {}
    with_extended = []
    per_flavor: dict[str, dict[str, int]] = {}
    for replica, task in zip(held, tasks, strict=True):
        extended = asked.get(task, NO_EXTENDED)
        with_extended.append(replace(replica, extended=extended) if extended else replica)
        flavor = flavor_of.get(replica.node)
        if extended and flavor is not None:
            in_flavor = per_flavor.setdefault(flavor, {})
            for name, amount in extended:
                in_flavor[name] = in_flavor.get(name, 0) + amount
    return with_extended, {f: extended_of(amounts) for f, amounts in per_flavor.items()}


def _pending_jobs(
    session: Session,
    specs: SpecCache,
    policy: ClusterPolicy,
    queues: tuple[QueueView, ...],
    recorded: dict[str, RecordedWait] | None,
    window: int,
    node_constraints: bool,
    views: PendingViews,
    now: float,
    estimates: RuntimeEstimates | None = None,
) -> tuple[PendingJob, ...]:
    # The first ``window`` pending jobs of each queue, in the core's order (priority, then
    # submit time), read through the partial index on pending jobs: a pass costs the same with
    # 10 or 10,000 jobs waiting.
    columns = (
        Job.id,
        Job.queue,
        Job.priority,
        Job.submitted_at,
        Job.tenant,
        Job.reason_code,
        Job.reason_message,
        Job.queue_position,
        Job.preempted_by,
        Job.cluster_position,
        Job.eta,
        Job.nominated_nodes,
        Job.excluded_nodes,
        Job.name,
        Job.submitted_by,
        Job.attempt,
    )
    rows: list[Row[Any]] = []
    for queue in queues:
        rows.extend(
            session.execute(
                select(*columns)
                .where(
                    Job.state == JobState.PENDING.value,
                    Job.gate.is_(None),  # held: kiban.control.gates
                    Job.queue == queue.name,
                )
                .order_by(Job.priority.desc(), Job.submitted_at, Job.id)
                .limit(window)
            ).all()
        )
    specs.load_missing(session, [r.id for r in rows])
    views.begin(policy, node_constraints)
    keys = {
        row.id: (
            *_view_key(row, now),
            row.submitted_by,
            estimated_runtime(estimates, row, specs.get_by_id(row.id, dict), None, now),
        )
        for row in rows
    }  # the estimate last: a new view is made with it
    las = las_queues(queues)
    attained = attained_service(
        session,
        [
            r.id
            for r in rows
            if r.queue in las and r.attempt > 1 and views.get(r.id, keys[r.id]) is None
        ],
    )
    pending = []
    for row in rows:
        nominated = (
            tuple(row.nominated_nodes or ())
            if row.reason_code == ReasonCode.WAITING_FOR_PREEMPTION.value
            else ()
        )
        excluded = active_exclusions(row.excluded_nodes, now)
        key = keys[row.id]
        view = views.get(row.id, key)
        if view is None:
            spec = specs.get_by_id(row.id, dict)
            estimated = key[-1]
            view = _pending_job(row, spec, policy, nominated, node_constraints, excluded, estimated)
            if row.id in attained:
                view = replace(view, attained_service=attained[row.id])
            view = views.put(row.id, key, view)
        pending.append(view)
        if recorded is not None:
            recorded[row.id] = RecordedWait(
                row.tenant,
                row.reason_code,
                row.reason_message,
                row.queue_position,
                row.cluster_position,
                row.eta,
            )
    views.end()
    return tuple(pending)


def _view_key(row: Row[Any], now: float) -> tuple[Any, ...]:
    """What a pending job's view is made of besides its spec: a cached view is reused while
    these are the same (the attempt: a job back from a run has attained more service)."""
    nominated = (
        tuple(row.nominated_nodes or ())
        if row.reason_code == ReasonCode.WAITING_FOR_PREEMPTION.value
        else ()
    )
    return (
        row.queue,
        row.priority,
        row.submitted_at,
        row.tenant,
        row.preempted_by,
        nominated,
        active_exclusions(row.excluded_nodes, now),
        row.attempt,
    )


def _pending_job(
    row: Row[Any],
    spec: JobSpec,
    policy: ClusterPolicy,
    nominated: tuple[str, ...],
    node_constraints: bool,
    excluded: frozenset[str] = frozenset(),
    estimated: float | None = None,
) -> PendingJob:
    """The core's view of a pending job from its row and spec; the nodes it must keep off
    (``excluded``) join each task's node constraint, which every part of the core honours."""
    topology = None
    if spec.topology is not None:
        topology = TopologyRequest(spec.topology.level, spec.topology.required)
    level = policy.priority(spec.priority_class)
    return PendingJob(
        id=row.id,
        queue=row.queue,
        priority=row.priority,
        submitted_at=row.submitted_at,
        tasks=with_exclusions(demands(spec, node_constraints), excluded),
        gang_size=spec.gang_size,
        tenant=row.tenant,
        max_runtime=spec.max_runtime,
        topology=topology,
        preempts=level.preempts if level else False,
        preempted_by=row.preempted_by,
        nominated_nodes=nominated,
        member=row.submitted_by,
        estimated_runtime=estimated,
    )
