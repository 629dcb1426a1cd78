"""Starting an admitted attempt: record its placement, then have the executor start it.

The placement is committed (its resources held) before the executor is called, so a crash in
between leaves an Admitted job that recovery undoes; a launch that fails marks the job Failed
with the executor's reason, and one cancelled meanwhile is left to settling to stop.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from kiban.clock import Clock
from kiban.control.snapshot_builder import SpecCache
from kiban.domain.states import JobState, ReplicaState
from kiban.executors.base import Capability, Executor, LaunchError, LaunchRequest
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.services.transitions import transition
from kiban.store.models import Job, Replica


def describe_placements(placements: Sequence[ReplicaPlacement]) -> str:
    """``worker[0] on node-1 (GPUs 0,1); ...``: where each replica went, for events."""
    parts = []
    for p in placements:
        gpus = ",".join(map(str, p.gpu_ids)) or "no GPUs"
        parts.append(f"{p.task}[{p.index}] on {p.node} (GPUs {gpus})")
    return "; ".join(parts)


class Launcher:
    """Launches attempts through one executor; job specs come from the loop's cache."""

    def __init__(self, executor: Executor, specs: SpecCache, clock: Clock) -> None:
        self.executor = executor
        self.specs = specs
        self.clock = clock

    def launch(
        self,
        session: Session,
        job: Job,
        placements: tuple[ReplicaPlacement, ...],
        now: float,
        *,
        restart: bool,
    ) -> None:
        """Record the placement (resources held from here on), then start the replicas."""
        spec = self.specs.get(job)
        # A port the job names (a Volcano pytorch --port) holds where replicas have their own
        # network (containers); on one machine a free port is picked instead.
        fixed = spec.master_port if Capability.CONTAINERS in self.executor.capabilities else None
        job.master_port = fixed or self.executor.pick_master_port()
        job.nominated_nodes = None
        rows = []
        for p in placements:
            row = Replica(
                job_id=job.id,
                attempt=job.attempt,
                task=p.task,
                index=p.index,
                rank=p.rank,
                node=p.node,
                gpu_ids=list(p.gpu_ids),
                cpu_millis=p.cpu_millis,
                memory=p.memory,
                active=True,
                state=ReplicaState.RUNNING.value,
            )
            session.add(row)
            rows.append(row)
        verb = f"Restarting (attempt {job.attempt})" if restart else "Admitted"
        transition(
            session,
            job,
            JobState.ADMITTED,
            reason="Restarting" if restart else "Admitted",
            message=f"{verb}: {describe_placements(placements)}",
            at=now,
        )
        session.commit()
        request = LaunchRequest(
            job_id=job.id,
            job_name=job.name,
            tenant=job.tenant,
            attempt=job.attempt,
            spec=spec,
            placements=placements,
            master_port=job.master_port,
            labels=(job.spec.get("metadata") or {}).get("labels") or {},
        )
        try:
            launched = self.executor.launch(request)
        except LaunchError as exc:
            for row in rows:
                row.active = False
                row.state = ReplicaState.LOST.value
            transition(
                session,
                job,
                JobState.FAILED,
                reason="LaunchFailed",
                message=str(exc),
                at=self.clock.now(),
                warning=True,
            )
            self.specs.forget(job.id)
            session.commit()
            return
        by_rank = {r.rank: r for r in launched}
        for row in rows:
            started = by_rank[row.rank]
            row.pid = started.pid
            row.pid_start_time = started.pid_start_time
            row.handle = started.handle
            row.started_at = started.started_at
        session.refresh(job, with_for_update=True)
        if job.state != JobState.ADMITTED.value:
            session.commit()  # cancelled while launching: settling stops what was started
            return
        transition(
            session,
            job,
            JobState.RUNNING,
            reason="Started",
            message=f"{len(rows)} replica(s) running",
            at=self.clock.now(),
        )
        session.commit()
