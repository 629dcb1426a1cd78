"""Settling: the running and stopping jobs brought in line with what the executor observes.

Each pass of the control loop settles before it schedules, in three steps per job: observe
(the replicas' states from the executor, the newest checkpoint), decide (the pure
``settle_rules.settle``), apply (a short transaction: replicas' exits recorded, the job
finished, failed, restarted, requeued or stopped: a grace period, then force). The executor's
stops that a settlement asks for (``settle_rules.stops_of``) are made with no transaction
open: before it, from the decision on what was read, so that a stop that fails leaves
nothing written and the next pass tries again; any that only the locked read adds, after the
commit. The scheduling half of the loop stops jobs through here too (``stop_for``), so every
stop goes through the same steps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, defer, sessionmaker

from kiban.control.launcher import Launcher
from kiban.control.settle_rules import (
    AskToStop,
    BeginStop,
    FinishStop,
    JobView,
    Kill,
    Observations,
    Relaunch,
    ReplicaStop,
    ReplicaView,
    Settlement,
    SettleRefused,
    Succeed,
    settle,
    stops_of,
)
from kiban.control.snapshot_builder import SpecCache
from kiban.domain.event_reasons import JobEventReason
from kiban.domain.mpi import MpiSpec
from kiban.domain.states import JobState, ReplicaState
from kiban.domain.stop_intents import StopIntent, rule_for
from kiban.executors.base import Executor, Observation, ReplicaRef, checkpoint_probe
from kiban.scheduler.decisions import Preempt, ReplicaPlacement
from kiban.services import events
from kiban.services.transitions import transition
from kiban.store.models import Job, Replica

log = logging.getLogger("kiban.control")

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


@dataclass(frozen=True, slots=True)
class StopCause:
    """Why the loop stops a job from outside its replicas' fate, typed up to its event."""

    intent: StopIntent
    reason: JobEventReason
    message: str
    preemptor: str | None = None

    @classmethod
    def preempted(cls, preempt: Preempt) -> StopCause:
        """The scheduler's preemption: its reason's sentence is the event's message."""
        return cls(
            StopIntent.PREEMPT,
            JobEventReason.PREEMPTED,
            preempt.reason.message,
            preemptor=preempt.preemptor_id,
        )

    @classmethod
    def node_unhealthy(cls, nodes: list[str]) -> StopCause:
        return cls(StopIntent.REQUEUE, JobEventReason.NODE_UNHEALTHY, f"node(s) unhealthy: {nodes}")


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

        1. Read every active job and its active replicas at once, without locks; observe them
           and decide: most jobs still run as they did, and need nothing written.
        2. The executor stops those decisions ask for are made, with no transaction open.
        3. Each job with something to do is settled in its own transaction, locked and read
           again, decided again on the same observations, and the settlement applied; a stop
           that only this second decision asks for is made after the commit.
        """
        changed = False
        with self.sessions() as session:
            active = self._active_jobs(session)  # read, then observed with no session open
        due: list[tuple[str, Observations, set[ReplicaStop]]] = []
        for job, replicas in active:
            seen = self._observe(job, replicas)
            settlement = self._decide(job, replicas, seen, now)
            if settlement is not None:
                made = self._stop(replicas, stops_of(self.view(job, replicas), settlement))
                due.append((job.id, seen, made))
        for job_id, seen, made in due:
            with self.sessions() as session:
                locked = session.get(Job, job_id, with_for_update=True)
                if locked is None or locked.state not in ACTIVE_STATES:
                    continue
                before = locked.state
                replicas = self.active_replicas(session, locked)
                more = self._observe_more(replicas, seen)
                settlement = self._decide(locked, replicas, more, now)
                if settlement is None:
                    continue
                stops = stops_of(self.view(locked, replicas), settlement)
                refs = {r.id: replica_ref(r) for r in replicas}
                self._apply(session, locked, replicas, settlement, now)
                changed = changed or locked.state != before
                session.commit()
            for stop in stops:
                if stop not in made:  # replicas the first read did not see running
                    self.executor.stop(refs[stop.replica_id], force=stop.force)
        return changed

    def _stop(self, replicas: list[Replica], stops: tuple[ReplicaStop, ...]) -> set[ReplicaStop]:
        """Make ``stops`` (no transaction open); those made."""
        by_id = {r.id: r for r in replicas}
        for stop in stops:
            self.executor.stop(replica_ref(by_id[stop.replica_id]), force=stop.force)
        return set(stops)

    # -- observe -------------------------------------------------------------------------------
    def _observe(self, job: Job, replicas: list[Replica]) -> Observations:
        """What the executor sees of the job's running replicas, and its newest checkpoint."""
        seen = {
            r.id: self.executor.observe(replica_ref(r))
            for r in replicas
            if r.state == ReplicaState.RUNNING.value
        }
        checkpoint = None
        if job.state == JobState.RUNNING.value:
            checkpoint = newest_checkpoint_at(self.executor, job.id)
        return Observations(seen, checkpoint)

    def _observe_more(self, replicas: list[Replica], seen: Observations) -> Observations:
        """``seen``, and the replicas running now that were not observed then (none, unless
        the job changed between the two reads)."""
        missing = [
            r
            for r in replicas
            if r.state == ReplicaState.RUNNING.value and r.id not in seen.replicas
        ]
        if not missing:
            return seen
        more: dict[int, Observation] = dict(seen.replicas)
        more.update({r.id: self.executor.observe(replica_ref(r)) for r in missing})
        return Observations(more, seen.newest_checkpoint_at)

    # -- decide --------------------------------------------------------------------------------
    def _decide(
        self, job: Job, replicas: list[Replica], seen: Observations, now: float
    ) -> Settlement | None:
        """The settlement of one job (None: nothing to do, or refused: logged loudly)."""
        try:
            settlement = settle(self.view(job, replicas), seen, now)
        except SettleRefused:
            log.exception("job %s cannot be settled; left as it is", job.id)
            return None
        return None if settlement.empty else settlement

    def view(self, job: Job, replicas: list[Replica]) -> JobView:
        spec = self.specs.get(job)
        return JobView(
            id=job.id,
            state=JobState(job.state),
            replicas=tuple(
                ReplicaView(
                    id=r.id,
                    task=r.task,
                    index=r.index,
                    rank=r.rank,
                    state=ReplicaState(r.state),
                    exit_code=r.exit_code,
                    waiting=r.waiting,
                )
                for r in replicas
            ),
            stop_intent=job.stop_intent,
            stop_deadline=job.stop_deadline,
            started_at=job.started_at,
            last_checkpoint_at=job.last_checkpoint_at,
            message=job.message,
            failed_attempts=job.failed_attempts,
            restart_policy=spec.restart_policy,
            backoff_limit=spec.backoff_limit,
            max_runtime=spec.max_runtime,
            grace_period=spec.termination_grace_period or 0.0,
            signalled=(job.id, job.attempt) in self._signalled,
            decided_by=(spec.mpi or MpiSpec()).launcher_task if spec.launcher == "mpirun" else None,
        )

    # -- apply ---------------------------------------------------------------------------------
    def _apply(
        self,
        session: Session,
        job: Job,
        replicas: list[Replica],
        settlement: Settlement,
        now: float,
    ) -> None:
        by_id = {r.id: r for r in replicas}
        for change in settlement.waiting:
            replica = by_id[change.replica_id]
            if change.event is not None:
                events.record_for_job(
                    session, job, JobEventReason.REPLICA_WAITING, change.event, now
                )
            replica.waiting = change.waiting
        for end in settlement.ended:
            replica = by_id[end.replica_id]
            replica.state = end.state.value
            replica.exit_code = end.exit_code
            replica.finished_at = now
            events.record_for_job(
                session, job, JobEventReason.REPLICA_EXITED, end.message, now, warning=end.warning
            )
        if settlement.checkpoint_at is not None:
            job.last_checkpoint_at = settlement.checkpoint_at
        for action in settlement.actions:
            if isinstance(action, Succeed):
                self._release(job, replicas)
                transition(
                    session,
                    job,
                    JobState.SUCCEEDED,
                    reason=JobEventReason.SUCCEEDED,
                    message=action.message,
                    at=now,
                )
                self.specs.forget(job.id)
            elif isinstance(action, BeginStop):
                self._begin_stop(session, job, action, now)
            elif isinstance(action, AskToStop):
                # Stopped from outside the loop (a cancel): asked politely first (stops_of).
                self._signalled.add((job.id, job.attempt))
            elif isinstance(action, Kill):
                job.stop_deadline = None  # killed once; their exits are seen in later passes
                events.record_for_job(
                    session, job, JobEventReason.KILLED, action.message, now, warning=True
                )
            elif isinstance(action, FinishStop):
                self._finish_stop(session, job, replicas, action.intent, now)
            elif isinstance(action, Relaunch):
                self._relaunch(session, job, replicas, now)

    def active_replicas(self, session: Session, job: Job) -> list[Replica]:
        query = (
            select(Replica)
            .where(Replica.job_id == job.id, Replica.active.is_(True))
            .order_by(Replica.rank)
        )
        return list(session.scalars(query))

    def _active_jobs(self, session: Session) -> list[tuple[Job, list[Replica]]]:
        """The running and stopping jobs, each with its active replicas (two queries), and
        their specs parsed: what ``view`` reads, and no document decoded again each pass."""
        query_jobs = (
            select(Job)
            .where(Job.state.in_(ACTIVE_STATES))
            .options(defer(Job.spec), defer(Job.reason_details), defer(Job.nominated_nodes))
        )
        jobs = list(session.scalars(query_jobs))
        self.specs.load_missing(session, [job.id for job in jobs])
        by_job: dict[str, list[Replica]] = {job.id: [] for job in jobs}
        query = (
            select(Replica)
            .options(defer(Replica.gpu_ids))
            .join(Job, Job.id == Replica.job_id)
            .where(Replica.active.is_(True), Job.state.in_(ACTIVE_STATES))
            .order_by(Replica.job_id, Replica.rank)
        )
        for replica in session.scalars(query):
            if replica.job_id in by_job:
                by_job[replica.job_id].append(replica)
        return [(job, by_job[job.id]) for job in jobs]

    def _begin_stop(self, session: Session, job: Job, stop: BeginStop, now: float) -> None:
        """The job is Stopping, with its intent and grace period (its replicas are asked to
        stop by the caller, with no transaction open)."""
        spec = self.specs.get(job)
        job.stop_intent = stop.intent
        job.stop_deadline = now + (spec.termination_grace_period or 0.0)
        self._signalled.add((job.id, job.attempt))
        transition(
            session,
            job,
            JobState.STOPPING,
            reason=stop.reason,
            message=stop.event_message,
            at=now,
            warning=True,
        )

    def _release(self, job: Job, replicas: list[Replica]) -> None:
        """Free the replicas' resources (no process of theirs is left: ``stops_of`` stops each
        at once before the transaction)."""
        for replica in replicas:
            replica.active = False

    def _end_stop(self, job: Job, replicas: list[Replica], intent: StopIntent) -> None:
        """The stop is over: its replicas released, its intent cleared, the attempt counted."""
        self._release(job, replicas)
        self._signalled.discard((job.id, job.attempt))
        job.stop_intent = None
        job.stop_deadline = None
        if rule_for(intent).counts_attempt:
            job.failed_attempts += 1

    def _finish_stop(
        self, session: Session, job: Job, replicas: list[Replica], intent: StopIntent, now: float
    ) -> None:
        """The job ends, or returns to its queue, as its intent's rule says."""
        rule = rule_for(intent)
        self._end_stop(job, replicas, intent)
        if rule.next_attempt:
            job.attempt += 1  # its next start is a new attempt, with the submit time it had
        message = (
            (job.message or "failed")
            if rule.finish_message is None
            else (rule.finish_message.format(preempted_by=job.preempted_by, queue=job.queue))
        )
        transition(
            session,
            job,
            rule.final_state,
            reason=rule.finish_reason,
            message=message,
            at=now,
            warning=rule.finish_warning,
            intent=intent,
        )
        if not rule.requeues:
            self.specs.forget(job.id)

    def _relaunch(self, session: Session, job: Job, replicas: list[Replica], now: float) -> None:
        """Start the next attempt on the nodes and devices the last one held."""
        self._end_stop(job, replicas, StopIntent.RESTART)
        placements = tuple(
            ReplicaPlacement(
                r.task, r.index, r.rank, r.node, tuple(r.gpu_ids), r.cpu_millis, r.memory
            )
            for r in replicas
        )
        job.attempt += 1
        self.launcher.launch(session, job, placements, now, restart=True)

    def stop_for(self, job_id: str, cause: StopCause, now: float) -> None:
        """Stop a running (or just admitted) job from outside its own replicas' fate: preempted,
        or on a node found unhealthy. Its own transaction; a job already gone is left alone."""
        with self.sessions() as session:
            job = session.get(Job, job_id, with_for_update=True)
            if job is None or job.state not in (JobState.RUNNING.value, JobState.ADMITTED.value):
                return
            if cause.preemptor is not None:
                job.preempted_by = cause.preemptor
            running = [
                replica_ref(r)
                for r in self.active_replicas(session, job)
                if r.state == ReplicaState.RUNNING.value
            ]
            stop = BeginStop(cause.intent, cause.reason, cause.message)
            self._begin_stop(session, job, stop, now)
            session.commit()
        for ref in running:  # asked politely after the commit; the grace period's end forces
            self.executor.stop(ref, force=False)


def newest_checkpoint_at(executor: Executor, job_id: str) -> float | None:
    """When the job last wrote a checkpoint, as its executor tells (``CheckpointProbe``: the
    local executor reads the job's checkpoint directory); None: none, or the executor cannot
    tell (reported once at start-up)."""
    probe = checkpoint_probe(executor)
    return None if probe is None else probe.newest_checkpoint(job_id)
