"""Settling: the running and stopping jobs brought in line with what the executor observes.

Each pass of the control loop settles before it schedules: replicas' exits and losses are
recorded, checkpoints noted, and each job finished, failed, restarted, requeued or stopped
(a grace period, then force). The scheduling half of the loop stops jobs through here too
(``stop_for``), so every stop goes through the same steps.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kiban.control.launcher import Launcher
from kiban.control.snapshot_builder import SpecCache
from kiban.domain.states import JobState, ReplicaState
from kiban.executors.base import Executor, ReplicaRef, cannot_start, checkpoint_probe
from kiban.scheduler import units
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.services import events
from kiban.services.transitions import transition
from kiban.store.models import Job, Replica

ACTIVE_STATES = (JobState.RUNNING.value, JobState.STOPPING.value)


def replica_ref(replica: Replica) -> ReplicaRef:
    return ReplicaRef(
        job_id=replica.job_id,
        attempt=replica.attempt,
        task=replica.task,
        index=replica.index,
        rank=replica.rank,
        handle=replica.handle,
    )


class JobSettler:
    """Settles active jobs, each in its own transaction; remembers which were asked to stop."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        executor: Executor,
        specs: SpecCache,
        launcher: Launcher,
    ) -> None:
        self.sessions = sessions
        self.executor = executor
        self.specs = specs
        self.launcher = launcher
        # (job, attempt) whose replicas were asked to stop; after a restart they are asked again.
        self._signalled: set[tuple[str, int]] = set()

    def settle(self, now: float) -> bool:
        """Observe running and stopping jobs; True if any of them changed state.

        1. Read every active job and its active replicas at once, without locks, and observe
           them: most jobs still run as they did, and need nothing written.
        2. Each job that may change (a replica ended, it is stopping, its maxRuntime passed,
           it wrote a checkpoint) is settled in its own transaction, locked and read again.
        """
        changed = False
        with self.sessions() as session:
            ids = [
                job.id
                for job, replicas in self._active_jobs(session)
                if self._may_change(job, replicas, now)
            ]
        for job_id in ids:
            with self.sessions() as session:
                job = session.get(Job, job_id, with_for_update=True)
                if job is None or job.state not in ACTIVE_STATES:
                    continue
                before = job.state
                self._settle_job(session, job, now)
                changed = changed or job.state != before
                session.commit()
        return changed

    def _active_jobs(self, session: Session) -> list[tuple[Job, list[Replica]]]:
        """The running and stopping jobs, each with its active replicas (two queries)."""
        jobs = list(session.scalars(select(Job).where(Job.state.in_(ACTIVE_STATES))))
        by_job: dict[str, list[Replica]] = {job.id: [] for job in jobs}
        query = (
            select(Replica)
            .join(Job, Job.id == Replica.job_id)
            .where(Replica.active.is_(True), Job.state.in_(ACTIVE_STATES))
            .order_by(Replica.job_id, Replica.rank)
        )
        for replica in session.scalars(query):
            if replica.job_id in by_job:
                by_job[replica.job_id].append(replica)
        return [(job, by_job[job.id]) for job in jobs]

    def _may_change(self, job: Job, replicas: list[Replica], now: float) -> bool:
        """Whether settling could change the job: anything but a job whose replicas all run
        on (waiting for what they waited for before), before its maxRuntime, with no newer
        checkpoint."""
        if job.state != JobState.RUNNING.value or not replicas:
            return True
        for replica in replicas:
            if replica.state != ReplicaState.RUNNING.value:
                return True
            seen = self.executor.observe(replica_ref(replica))
            if not seen.running or (seen.message or None) != replica.waiting:
                return True
        return self._past_max_runtime(job, now) or self._newer_checkpoint(job) is not None

    def _past_max_runtime(self, job: Job, now: float) -> bool:
        max_runtime = self.specs.get(job).max_runtime
        return (
            max_runtime is not None
            and job.started_at is not None
            and (now - job.started_at > max_runtime)
        )

    def _newer_checkpoint(self, job: Job) -> float | None:
        """When a file was last written in the job's checkpoint directory, if after the last
        checkpoint recorded (None: nothing newer)."""
        probe = checkpoint_probe(self.executor)
        newest = None if probe is None else probe.newest_checkpoint(job.id)
        if newest is not None and (job.last_checkpoint_at or 0.0) < newest:
            return newest
        return None

    def active_replicas(self, session: Session, job: Job) -> list[Replica]:
        query = (
            select(Replica)
            .where(Replica.job_id == job.id, Replica.active.is_(True))
            .order_by(Replica.rank)
        )
        return list(session.scalars(query))

    def _note_waiting(
        self, session: Session, job: Job, replica: Replica, waiting: str | None, now: float
    ) -> None:
        """Keep what a running replica waits for (its image being pulled), written only when
        it changes; its start is an event on the job."""
        if replica.waiting == waiting:
            return
        if replica.waiting is None and waiting is not None:
            events.record(
                session,
                kind="Job",
                name=job.id,
                tenant=job.tenant,
                reason="ReplicaWaiting",
                message=f"replica {replica.task}[{replica.index}] (rank {replica.rank}) is "
                f"{waiting}",
                at=now,
                warning=True,
            )
        replica.waiting = waiting

    def _settle_job(self, session: Session, job: Job, now: float) -> None:
        replicas = self.active_replicas(session, job)
        running: list[Replica] = []
        failed: list[tuple[Replica, str]] = []
        for replica in replicas:
            if replica.state == ReplicaState.RUNNING.value:
                seen = self.executor.observe(replica_ref(replica))
                if seen.running:
                    running.append(replica)
                    self._note_waiting(session, job, replica, seen.message or None, now)
                    continue
                replica.state = (ReplicaState.LOST if seen.lost else ReplicaState.EXITED).value
                replica.exit_code = seen.exit_code
                replica.finished_at = now
                what = f"{replica.task}[{replica.index}] (rank {replica.rank})"
                # stopping, its end was asked for: no warning (the job's own event says why),
                # and a pod deleted with its grace period (a cancel on Kubernetes) stopped
                stopping = job.state == JobState.STOPPING.value
                if seen.lost and stopping:
                    message = f"replica {what} stopped: {seen.message}"
                elif seen.lost:
                    message = f"replica {what} was lost: {seen.message}"
                else:
                    message = f"replica {what} exited with code {seen.exit_code}"
                    if seen.message:
                        message += f": {seen.message}"
                events.record(
                    session,
                    kind="Job",
                    name=job.id,
                    tenant=job.tenant,
                    reason="ReplicaExited",
                    message=message,
                    at=now,
                    warning=not stopping and (seen.lost or seen.exit_code != 0),
                )
                if seen.lost or seen.exit_code != 0:
                    failed.append((replica, message))
            elif replica.exit_code not in (0, None) or replica.state == ReplicaState.LOST.value:
                failed.append((replica, job.message or "replica failed"))

        spec = self.specs.get(job)
        if job.state == JobState.RUNNING.value:
            self._note_checkpoint(job)
            if failed:
                message = failed[0][1]
                retry = spec.restart_policy == "OnFailure" and job.attempt <= spec.backoff_limit
                if retry and any(cannot_start(why) for _, why in failed):
                    # its image or configuration is at fault: another attempt would fail alike
                    retry = False
                    message += "; not retried, as every attempt starts the same container"
                # Replicas lost (vanished with their pod or node) are no fault of the job's own.
                lost = all(r.state == ReplicaState.LOST.value for r, _ in failed)
                self._begin_stop(
                    session,
                    job,
                    running,
                    "lost" if lost else "restart" if retry else "fail",
                    reason="ReplicaFailed",
                    message=message,
                    now=now,
                )
            elif not running:
                self._release(job, replicas)
                transition(
                    session,
                    job,
                    JobState.SUCCEEDED,
                    reason="Succeeded",
                    message="all replicas exited with code 0",
                    at=now,
                )
                self.specs.forget(job.id)
                return
            elif self._past_max_runtime(job, now):
                self._begin_stop(
                    session,
                    job,
                    running,
                    "deadline",
                    reason="DeadlineExceeded",
                    message=f"ran longer than maxRuntime ({units.duration(spec.max_runtime or 0)})",
                    now=now,
                )
        if job.state == JobState.STOPPING.value:
            if running and (job.id, job.attempt) not in self._signalled:
                # Stopped from outside the loop (a cancel): ask politely first.
                for replica in running:
                    self.executor.stop(replica_ref(replica), force=False)
                self._signalled.add((job.id, job.attempt))
            if running and job.stop_deadline is not None and now >= job.stop_deadline:
                for replica in running:
                    self.executor.stop(replica_ref(replica), force=True)
                job.stop_deadline = None  # killed once; their exits are seen in later passes
                events.record(
                    session,
                    kind="Job",
                    name=job.id,
                    tenant=job.tenant,
                    reason="Killed",
                    warning=True,
                    at=now,
                    message=f"grace period over; killed {len(running)} replica(s)",
                )
            if not running:
                self._finish_stop(session, job, replicas, now)

    def _note_checkpoint(self, job: Job) -> None:
        """A file written in the job's checkpoint directory counts as a checkpoint."""
        newest = self._newer_checkpoint(job)
        if newest is not None:
            job.last_checkpoint_at = newest

    def _begin_stop(
        self,
        session: Session,
        job: Job,
        running: list[Replica],
        intent: str,
        *,
        reason: str,
        message: str,
        now: float,
    ) -> None:
        spec = self.specs.get(job)
        job.stop_intent = intent
        job.stop_deadline = now + (spec.termination_grace_period or 0.0)
        for replica in running:
            self.executor.stop(replica_ref(replica), force=False)
        self._signalled.add((job.id, job.attempt))
        suffix = {
            "restart": "; restarting",
            "preempt": "; it returns to its queue",
            "requeue": "; it returns to its queue",
            "lost": "; it returns to its queue",
        }.get(intent, "")
        transition(
            session,
            job,
            JobState.STOPPING,
            reason=reason,
            message=message + suffix,
            at=now,
            warning=True,
        )

    def _release(self, job: Job, replicas: list[Replica]) -> None:
        """Free the replicas' resources and make sure no process of theirs is left."""
        for replica in replicas:
            self.executor.stop(replica_ref(replica), force=True)
            replica.active = False

    def _finish_stop(self, session: Session, job: Job, replicas: list[Replica], now: float) -> None:
        intent = job.stop_intent or "fail"
        self._release(job, replicas)
        self._signalled.discard((job.id, job.attempt))
        job.stop_intent = None
        job.stop_deadline = None
        if intent == "cancel":
            transition(
                session,
                job,
                JobState.CANCELLED,
                reason="Cancelled",
                message="all replicas stopped",
                at=now,
            )
        elif intent in ("preempt", "requeue", "lost"):
            # Back in its queue with its original submit time; the next attempt starts anew.
            job.attempt += 1
            transition(
                session,
                job,
                JobState.PENDING,
                reason="Requeued",
                message=(
                    f"preempted by job {job.preempted_by}; waits in queue {job.queue} again"
                    if intent == "preempt"
                    else f"its node became unhealthy; waits in queue {job.queue} again"
                    if intent == "requeue"
                    else f"a replica was lost; waits in queue {job.queue} again"
                ),
                at=now,
            )
            return
        elif intent == "restart":
            placements = tuple(
                ReplicaPlacement(
                    r.task, r.index, r.rank, r.node, tuple(r.gpu_ids), r.cpu_millis, r.memory
                )
                for r in replicas
            )
            job.attempt += 1
            self.launcher.launch(session, job, placements, now, restart=True)
            return
        else:
            message = job.message or "failed"
            transition(
                session,
                job,
                JobState.FAILED,
                reason="Failed",
                message=message,
                at=now,
                warning=True,
            )
        self.specs.forget(job.id)

    def stop_for(
        self,
        job_id: str,
        intent: str,
        reason: str,
        message: str,
        now: float,
        preemptor: str | None = None,
    ) -> None:
        """Stop a running (or just admitted) job from outside its own replicas' fate: preempted,
        or on a node found unhealthy. Its own transaction; a job already gone is left alone."""
        with self.sessions() as session:
            job = session.get(Job, job_id, with_for_update=True)
            if job is None or job.state not in (JobState.RUNNING.value, JobState.ADMITTED.value):
                return
            if preemptor is not None:
                job.preempted_by = preemptor
            running = [
                r
                for r in self.active_replicas(session, job)
                if r.state == ReplicaState.RUNNING.value
            ]
            self._begin_stop(session, job, running, intent, reason=reason, message=message, now=now)
            session.commit()
