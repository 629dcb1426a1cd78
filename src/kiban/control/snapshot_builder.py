"""Build the scheduler's immutable snapshot from the store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from kiban.domain.jobspec import JobSpec
from kiban.domain.manifests import parse_job_manifest
from kiban.domain.states import JobState
from kiban.scheduler.snapshot import (
    DEFAULT_FLAVOR,
    PendingJob,
    QueueStrategy,
    QueueView,
    Snapshot,
    TaskDemand,
    node_view,
)
from kiban.store.models import Job, Node, Queue, Replica


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


@dataclass(frozen=True, slots=True)
class RecordedWait:
    """What the store already says about a pending job, so unchanged reasons are not rewritten."""

    tenant: str
    code: str | None
    message: str | None
    position: int | None


def demands(spec: JobSpec) -> tuple[TaskDemand, ...]:
    return tuple(
        TaskDemand(t.name, t.replicas, t.resources.gpu, t.resources.cpu, t.resources.memory)
        for t in spec.tasks
    )


def build_snapshot(
    session: Session,
    specs: SpecCache,
    now: float,
    recorded: dict[str, RecordedWait] | None = None,
    window: int = 256,
) -> Snapshot:
    """Nodes with what is free on them, queues with GPUs in use, and the pending jobs.

    Only the first ``window`` pending jobs of each queue are in the snapshot; the others have no
    recorded reason, and readers say they wait in the queue's backlog (``awaiting_pass``).
    """
    used_gpus: dict[str, set[int]] = {}
    used_cpu: dict[str, int] = {}
    used_memory: dict[str, int] = {}
    queue_gpus: dict[str, int] = {}
    active = session.execute(
        select(Replica.node, Replica.gpu_ids, Replica.cpu_millis, Replica.memory, Job.queue)
        .join(Job, Job.id == Replica.job_id)
        .where(Replica.active.is_(True))
    ).all()
    for node, gpu_ids, cpu, memory, queue in active:
        used_gpus.setdefault(node, set()).update(gpu_ids or [])
        used_cpu[node] = used_cpu.get(node, 0) + cpu
        used_memory[node] = used_memory.get(node, 0) + memory
        queue_gpus[queue] = queue_gpus.get(queue, 0) + len(gpu_ids or [])

    nodes = []
    for row in session.scalars(select(Node).order_by(Node.name)):
        taken = used_gpus.get(row.name, set())
        reason = "" if row.healthy else (row.health_message or "unhealthy")
        if row.cordoned:
            reason = "cordoned"
        nodes.append(
            node_view(
                name=row.name,
                gpus=row.gpus,
                cpu_millis=row.cpu_millis,
                memory=row.memory,
                used_gpu_ids=taken,
                used_cpu_millis=used_cpu.get(row.name, 0),
                used_memory=used_memory.get(row.name, 0),
                labels=row.labels or {},
                schedulable=row.healthy and not row.cordoned,
                unschedulable_reason=reason,
            )
        )
    queues = tuple(
        QueueView(
            name=q.name,
            tenant=q.tenant,
            nominal=None if q.gpu_quota is None else {DEFAULT_FLAVOR: q.gpu_quota},
            used={DEFAULT_FLAVOR: queue_gpus[q.name]} if q.name in queue_gpus else {},
            strategy=QueueStrategy(q.strategy),
        )
        for q in session.scalars(select(Queue).order_by(Queue.name))
    )
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
    )
    pending_rows: list[Row[str, str, int, float, str, str | None, str | None, int | None]] = []
    for queue in queues:
        pending_rows.extend(
            session.execute(
                select(*columns)
                .where(Job.state == JobState.PENDING.value, Job.queue == queue.name)
                .order_by(Job.priority.desc(), Job.submitted_at, Job.id)
                .limit(window)
            ).all()
        )
    unparsed = [r.id for r in pending_rows if not specs.known(r.id)]
    documents: dict[str, dict[str, Any]] = {}
    for start in range(0, len(unparsed), 500):
        chunk = unparsed[start : start + 500]
        for job_id, document in session.execute(
            select(Job.id, Job.spec).where(Job.id.in_(chunk))
        ).all():
            documents[job_id] = document
    pending = []
    for job_row in pending_rows:
        spec = specs.get_by_id(job_row.id, partial(documents.__getitem__, job_row.id))
        pending.append(
            PendingJob(
                id=job_row.id,
                queue=job_row.queue,
                priority=job_row.priority,
                submitted_at=job_row.submitted_at,
                tasks=demands(spec),
                gang_size=spec.gang_size,
            )
        )
        if recorded is not None:
            recorded[job_row.id] = RecordedWait(
                job_row.tenant, job_row.reason_code, job_row.reason_message, job_row.queue_position
            )
    return Snapshot(now=now, nodes=tuple(nodes), queues=queues, pending=tuple(pending))
