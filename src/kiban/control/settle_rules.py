"""Settling decided: what to do with one running or stopping job, from what the store holds
of it and what was observed of its replicas. Pure: no store, no executor, no clock.

``settle(view, observations, now)`` returns a ``Settlement``: the replicas found ended or
waiting, a newer checkpoint, and the job's actions in the order they are applied (a stop
begun may end in the same pass when no replica runs any more). ``JobSettler`` gathers the
observations first and applies the settlement after, in a short transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kiban.domain.event_reasons import JobEventReason
from kiban.domain.states import JobState, ReplicaState
from kiban.domain.stop_intents import StopIntent, rule_for
from kiban.executors.base import Observation, cannot_start
from kiban.scheduler import units


class SettleRefused(ValueError):
    """A job the rules cannot settle (stopping with no intent, a replica not observed): a bug
    or a store changed by hand, refused rather than guessed."""


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One active replica as the store holds it."""

    id: int
    task: str
    index: int
    rank: int
    state: ReplicaState
    exit_code: int | None = None
    waiting: str | None = None

    @property
    def name(self) -> str:
        return f"{self.task}[{self.index}] (rank {self.rank})"


@dataclass(frozen=True, slots=True)
class JobView:
    """What settling needs of a running or stopping job: its row, its spec's restart and
    time limits, its active replicas in rank order, and whether they were asked to stop."""

    id: str
    state: JobState
    replicas: tuple[ReplicaView, ...] = ()
    stop_intent: StopIntent | None = None
    stop_deadline: float | None = None
    started_at: float | None = None
    last_checkpoint_at: float | None = None
    message: str | None = None
    failed_attempts: int = 0  # attempts ended by its own failure (counted against backoffLimit)
    restart_policy: str = "Never"
    backoff_limit: int = 0
    max_runtime: float | None = None
    grace_period: float = 0.0
    signalled: bool = False  # this attempt's replicas were asked to stop already
    decided_by: str | None = None
    """The task whose replica exiting 0 ends the job in success, the others then stopped: an
    MPI job's launcher (its workers serve mpirun's remote starts until stopped, as the MPI
    Operator's do). None: the job succeeds when every replica has exited 0."""


@dataclass(frozen=True, slots=True)
class Observations:
    """What was seen before deciding: each RUNNING replica's observation by replica id, and
    when the job last wrote a checkpoint (None: never, or not known)."""

    replicas: Mapping[int, Observation]
    newest_checkpoint_at: float | None = None


@dataclass(frozen=True, slots=True)
class ReplicaEnded:
    """A replica found exited or lost, and the event that says so."""

    replica_id: int
    state: ReplicaState
    exit_code: int | None
    message: str
    warning: bool


@dataclass(frozen=True, slots=True)
class WaitingChanged:
    """A running replica waits for something else now (None: nothing); ``event``: the message
    of the event recorded when it starts to wait."""

    replica_id: int
    waiting: str | None
    event: str | None = None


@dataclass(frozen=True, slots=True)
class Succeed:
    """Every replica exited with code 0."""

    message: str = "all replicas exited with code 0"


@dataclass(frozen=True, slots=True)
class BeginStop:
    """Ask the running replicas to stop, for ``intent``; the job is Stopping."""

    intent: StopIntent
    reason: JobEventReason
    message: str

    @property
    def event_message(self) -> str:
        return self.message + rule_for(self.intent).begin_suffix


@dataclass(frozen=True, slots=True)
class AskToStop:
    """A stop begun outside the loop (a cancel): ask the running replicas to stop."""


@dataclass(frozen=True, slots=True)
class Kill:
    """The grace period is over: kill the ``count`` replicas still running."""

    count: int

    @property
    def message(self) -> str:
        return f"grace period over; killed {self.count} replica(s)"


@dataclass(frozen=True, slots=True)
class FinishStop:
    """No replica runs any more: the job ends, or returns to its queue, as its intent's rule
    says."""

    intent: StopIntent


@dataclass(frozen=True, slots=True)
class Relaunch:
    """No replica runs any more and another attempt is allowed: start it where it ran."""


JobAction = Succeed | BeginStop | AskToStop | Kill | FinishStop | Relaunch


@dataclass(frozen=True, slots=True)
class Settlement:
    """Everything settling does to one job this pass (nothing at all: most running jobs)."""

    ended: tuple[ReplicaEnded, ...] = ()
    waiting: tuple[WaitingChanged, ...] = ()
    checkpoint_at: float | None = None
    actions: tuple[JobAction, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.ended or self.waiting or self.actions) and self.checkpoint_at is None


@dataclass(frozen=True, slots=True)
class ReplicaStop:
    """An executor stop that a settlement asks for: politely, or at once with ``force``."""

    replica_id: int
    force: bool


def stops_of(view: JobView, settlement: Settlement) -> tuple[ReplicaStop, ...]:
    """The executor stops ``settlement`` of ``view``'s job asks for, in order: politely the
    replicas still running when a stop begins or is asked for; at once those still running
    when the grace period is over, and every replica of an attempt that is over (succeeded,
    finished stopping, or relaunched: nothing of it may be left). Carried out with no
    transaction open."""
    ended = {end.replica_id for end in settlement.ended}
    running = [r.id for r in view.replicas if r.state is ReplicaState.RUNNING and r.id not in ended]
    every = [r.id for r in view.replicas]
    stops: list[ReplicaStop] = []
    for action in settlement.actions:
        if isinstance(action, BeginStop | AskToStop):
            stops += [ReplicaStop(i, force=False) for i in running]
        elif isinstance(action, Kill):
            stops += [ReplicaStop(i, force=True) for i in running]
        else:  # Succeed, FinishStop, Relaunch: the attempt is over
            stops += [ReplicaStop(i, force=True) for i in every]
    return tuple(dict.fromkeys(stops))


NOT_RETRIED = "; not retried, as every attempt starts the same container"


def settle(view: JobView, observations: Observations, now: float) -> Settlement:
    """What to do with ``view``'s job now, given ``observations`` of its replicas."""
    if view.state not in (JobState.RUNNING, JobState.STOPPING):
        raise SettleRefused(f"job {view.id} is {view.state}, neither running nor stopping")
    stopping = view.state is JobState.STOPPING
    running: list[ReplicaView] = []
    ended: list[ReplicaEnded] = []
    waiting: list[WaitingChanged] = []
    failed: list[tuple[ReplicaState, str]] = []  # state (as now), the message that says why
    for replica in view.replicas:
        if replica.state is ReplicaState.RUNNING:
            seen = observations.replicas.get(replica.id)
            if seen is None:
                raise SettleRefused(f"job {view.id}: replica {replica.name} was not observed")
            if seen.running:
                running.append(replica)
                change = waiting_change(replica, seen.message or None)
                if change is not None:
                    waiting.append(change)
                continue
            end = replica_ended(replica, seen, stopping)
            ended.append(end)
            if seen.lost or seen.exit_code != 0:
                failed.append((end.state, end.message))
        elif replica.exit_code not in (0, None) or replica.state is ReplicaState.LOST:
            failed.append((replica.state, view.message or "replica failed"))
    decided = decider_succeeded(view, ended)

    actions: list[JobAction] = []
    checkpoint_at = None
    intent = view.stop_intent
    signalled = view.signalled
    deadline = view.stop_deadline
    if not stopping:
        newest = observations.newest_checkpoint_at
        if newest is not None and (view.last_checkpoint_at or 0.0) < newest:
            checkpoint_at = newest
        begin = begin_stop(view, failed, any_running=bool(running) and not decided, now=now)
        if isinstance(begin, Succeed) and decided and running:
            begin = Succeed(f"task {view.decided_by} exited with code 0; the others were stopped")
        if isinstance(begin, Succeed):
            return Settlement(tuple(ended), tuple(waiting), checkpoint_at, (begin,))
        if begin is not None:
            actions.append(begin)
            stopping, intent, signalled = True, begin.intent, True
            deadline = now + view.grace_period
    if stopping:
        if intent is None:
            raise SettleRefused(f"job {view.id} is stopping with no stop intent")
        if running and not signalled:
            actions.append(AskToStop())
        if running and deadline is not None and now >= deadline:
            actions.append(Kill(len(running)))
        if not running:
            actions.append(Relaunch() if rule_for(intent).relaunches else FinishStop(intent))
    return Settlement(tuple(ended), tuple(waiting), checkpoint_at, tuple(actions))


def begin_stop(
    view: JobView, failed: list[tuple[ReplicaState, str]], *, any_running: bool, now: float
) -> BeginStop | Succeed | None:
    """For a running job: a stop to begin (a replica failed, its maxRuntime passed), success
    (no replica runs and none failed), or None (it runs on)."""
    if failed:
        message = failed[0][1]
        retry = view.restart_policy == "OnFailure" and view.failed_attempts < view.backoff_limit
        if retry and any(cannot_start(why) for _, why in failed):
            # its image or configuration is at fault: another attempt would fail alike
            retry = False
            message += NOT_RETRIED
        # Replicas lost (vanished with their pod or node) are no fault of the job's own.
        lost = all(state is ReplicaState.LOST for state, _ in failed)
        intent = StopIntent.LOST if lost else StopIntent.RESTART if retry else StopIntent.FAIL
        return BeginStop(intent, JobEventReason.REPLICA_FAILED, message)
    if not any_running:
        return Succeed()
    if past_max_runtime(view, now):
        limit = units.duration(view.max_runtime or 0)
        return BeginStop(
            StopIntent.DEADLINE,
            JobEventReason.DEADLINE_EXCEEDED,
            f"ran longer than maxRuntime ({limit})",
        )
    return None


def decider_succeeded(view: JobView, ended: list[ReplicaEnded]) -> bool:
    """Whether a replica of the job's deciding task (``decided_by``) has exited 0, in an
    earlier pass or in this one (``ended``)."""
    if view.decided_by is None:
        return False
    now_ended = {end.replica_id: end for end in ended}
    for replica in view.replicas:
        if replica.task != view.decided_by:
            continue
        end = now_ended.get(replica.id)
        state, code = (end.state, end.exit_code) if end else (replica.state, replica.exit_code)
        if state is ReplicaState.EXITED and code == 0:
            return True
    return False


def past_max_runtime(view: JobView, now: float) -> bool:
    return (
        view.max_runtime is not None
        and view.started_at is not None
        and now - view.started_at > view.max_runtime
    )


def replica_ended(replica: ReplicaView, seen: Observation, stopping: bool) -> ReplicaEnded:
    """A replica seen no longer running: exited with a code, or lost. While the job stops its
    end was asked for: no warning (the job's own event says why), and a replica lost then
    (a pod deleted with its grace period, a cancel on Kubernetes) stopped."""
    if seen.lost and stopping:
        message = f"replica {replica.name} stopped: {seen.message}"
    elif seen.lost:
        message = f"replica {replica.name} was lost: {seen.message}"
    else:
        message = f"replica {replica.name} exited with code {seen.exit_code}"
        if seen.message:
            message += f": {seen.message}"
    return ReplicaEnded(
        replica_id=replica.id,
        state=ReplicaState.LOST if seen.lost else ReplicaState.EXITED,
        exit_code=seen.exit_code,
        message=message,
        warning=not stopping and (seen.lost or seen.exit_code != 0),
    )


def waiting_change(replica: ReplicaView, waiting: str | None) -> WaitingChanged | None:
    """What a running replica waits for, when it changed; an event when it starts to wait."""
    if replica.waiting == waiting:
        return None
    event = None
    if replica.waiting is None and waiting is not None:
        event = f"replica {replica.name} is {waiting}"
    return WaitingChanged(replica.id, waiting, event)
