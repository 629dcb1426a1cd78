"""Starting an admitted attempt: record its placement, then have the executor start it.

The placement is committed (its resources held) before the executor is called, so a crash in
between leaves an Admitted job that recovery undoes; a launch that fails marks the job Failed
with the executor's reason (any exception: whatever the executor started is abandoned first),
and one cancelled meanwhile is left to settling to stop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.clock import Clock
from kiban.control.snapshot_builder import SpecCache
from kiban.domain.event_reasons import JobEventReason
from kiban.domain.states import JobState, ReplicaState
from kiban.executors.base import (
    Capability,
    Executor,
    LaunchedReplica,
    LaunchError,
    LaunchRequest,
)
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.services import accounting, job_arrays, notebooks
from kiban.services.auth import create_job_token
from kiban.services.transitions import transition
from kiban.store.models import Job, Replica

log = logging.getLogger("kiban.control")


def describe_placements(placements: Sequence[ReplicaPlacement]) -> str:
    """``worker[0] on node-1 (GPUs 0,1); ...``: where each replica went, for events."""
    parts = []
    for p in placements:
        gpus = ",".join(map(str, p.gpu_ids)) or "no GPUs"
        parts.append(f"{p.task}[{p.index}] on {p.node} (GPUs {gpus})")
    return "; ".join(parts)


def launch_failure_message(exc: Exception) -> str:
    """What an unexpected exception in a launch says in the job's events."""
    detail = str(exc) or "(no message)"
    return f"the launch failed: {type(exc).__name__}: {detail}"


class Launcher:
    """Launches attempts through one executor; job specs come from the loop's cache."""

    def __init__(self, executor: Executor, specs: SpecCache, clock: Clock) -> None:
        self.executor = executor
        self.specs = specs
        self.clock = clock
        self.api_url: str | None = None
        """Where replicas reach kiban's API; when set, each attempt's replicas get it as
        ``KIBAN_URL`` with a token of their job's own as ``KIBAN_TOKEN`` (see ``Principal``)."""

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
        self.launch_all(session, [(job, placements)], now, restart=restart)

    def launch_all(
        self,
        session: Session,
        admitted: Sequence[tuple[Job, tuple[ReplicaPlacement, ...]]],
        now: float,
        *,
        restart: bool = False,
        flavors: Mapping[str, str] | None = None,
    ) -> None:
        """Start several admitted attempts: their placements recorded in one commit, the
        executor called for them (``launch_concurrency`` at once), the outcomes in one commit.

        One commit each way instead of two per job, and launches that wait on a remote API
        overlap: what a pass admitting hundreds of jobs costs on Kubernetes.
        """
        if not admitted:
            return
        flavor_of = flavors or {}
        last = accounting.last_records(session, [job.id for job, _p in admitted])
        recorded = [
            self._record(session, job, p, now, restart, flavor_of.get(job.id), last.get(job.id))
            for job, p in admitted
        ]
        session.commit()
        outcomes = self._start([request for _job, _rows, request in recorded])
        jobs = [job for job, _rows, _request in recorded]
        # Re-read their states: one cancelled while launching is left to settling to stop.
        session.scalars(
            select(Job)
            .where(Job.id.in_([job.id for job in jobs]))
            .with_for_update()
            .execution_options(populate_existing=True)
        ).all()
        for (job, rows, _request), outcome in zip(recorded, outcomes, strict=True):
            if isinstance(outcome, Exception):
                self._failed(session, job, rows, outcome)
            else:
                self._started(session, job, rows, outcome)
        session.commit()

    def _record(
        self,
        session: Session,
        job: Job,
        placements: tuple[ReplicaPlacement, ...],
        now: float,
        restart: bool,
        flavor: str | None = None,
        last: accounting.LastRecord | None = None,
    ) -> tuple[Job, list[Replica], LaunchRequest]:
        """The attempt's replicas, its move to Admitted and its usage record opened (not
        committed), and its request. ``flavor`` None: a relaunch keeps its ``last`` one's."""
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
            reason=JobEventReason.RESTARTING if restart else JobEventReason.ADMITTED,
            message=f"{verb}: {describe_placements(placements)}",
            at=now,
        )
        accounting.open_attempt(session, job, rows, now, flavor, last)
        api_env = {}
        if self.api_url is not None:
            token = create_job_token(session, job_id=job.id, tenant=job.tenant, at=now)
            api_env = {"KIBAN_URL": self.api_url, "KIBAN_TOKEN": token}
        api_env.update(notebooks.launch_env(session, job))  # a notebook's Jupyter token
        api_env.update(job_arrays.launch_env(job))  # an array index's KIBAN_ARRAY_*
        request = LaunchRequest(
            job_id=job.id,
            job_name=job.name,
            tenant=job.tenant,
            attempt=job.attempt,
            spec=spec,
            placements=placements,
            master_port=job.master_port,
            labels=(job.spec.get("metadata") or {}).get("labels") or {},
            api_env=api_env,
        )
        return job, rows, request

    def _start(self, requests: list[LaunchRequest]) -> list[list[LaunchedReplica] | Exception]:
        """Each request's replicas, or why it could not start; in order."""
        workers = min(len(requests), max(1, self.executor.launch_concurrency))
        if workers <= 1:
            return [self._start_one(request) for request in requests]
        with ThreadPoolExecutor(workers, thread_name_prefix="kiban-launch") as pool:
            return list(pool.map(self._start_one, requests))

    def _start_one(self, request: LaunchRequest) -> list[LaunchedReplica] | Exception:
        """The replicas started, or what went wrong (one launch's error is not its batch's).

        A LaunchError is the executor's word that nothing of the attempt is left; after any
        other exception (a bug, a value the OS refuses, an API gone mid-call) what it may have
        started is abandoned here, before the attempt is recorded as ended.
        """
        try:
            return self.executor.launch(request)
        except LaunchError as exc:
            return exc
        except Exception as exc:
            log.error("launching job %s failed", request.job_id, exc_info=exc)
            try:
                self.executor.abandon(request.job_id, request.attempt)
            except Exception:
                log.exception("abandoning job %s after its failed launch failed", request.job_id)
            return exc

    def _failed(self, session: Session, job: Job, rows: list[Replica], exc: Exception) -> None:
        """End the attempt: its replicas hold nothing, and the job fails with the error."""
        for row in rows:
            row.active = False
            row.state = ReplicaState.LOST.value
        message = str(exc) if isinstance(exc, LaunchError) else launch_failure_message(exc)
        transition(
            session,
            job,
            JobState.FAILED,
            reason=JobEventReason.LAUNCH_FAILED,
            message=message,
            at=self.clock.now(),
            warning=True,
        )
        self.specs.forget(job.id)

    def _started(
        self, session: Session, job: Job, rows: list[Replica], launched: list[LaunchedReplica]
    ) -> None:
        by_rank = {r.rank: r for r in launched}
        for row in rows:
            started = by_rank[row.rank]
            row.pid = started.pid
            row.handle = started.handle
            row.started_at = started.started_at
        if job.state != JobState.ADMITTED.value:
            return  # cancelled while launching: settling stops what was started
        transition(
            session,
            job,
            JobState.RUNNING,
            reason=JobEventReason.STARTED,
            message=f"{len(rows)} replica(s) running",
            at=self.clock.now(),
        )
