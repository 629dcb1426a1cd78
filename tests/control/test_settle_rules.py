"""Settling decided, case by case: every stop intent and replica outcome, retries counted,
requeue or final state, and what the rules refuse."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from kiban.control.settle_rules import (
    NOT_RETRIED,
    AskToStop,
    BeginStop,
    FinishStop,
    JobAction,
    JobView,
    Kill,
    Observations,
    Relaunch,
    ReplicaEnded,
    ReplicaStop,
    ReplicaView,
    Settlement,
    SettleRefused,
    Succeed,
    WaitingChanged,
    settle,
    stops_of,
)
from kiban.domain.event_reasons import JobEventReason as R
from kiban.domain.states import JobState, ReplicaState
from kiban.domain.stop_intents import RULES, StopIntent
from kiban.executors.base import CANNOT_START, Observation

NOW = 1000.0
RUNNING = Observation(running=True)
EXIT_0 = Observation(running=False, exit_code=0)
EXIT_1 = Observation(running=False, exit_code=1)
LOST = Observation(running=False, lost=True, message="its pod was deleted")


def replica(rank: int, state: ReplicaState = ReplicaState.RUNNING, **fields: object) -> ReplicaView:
    return ReplicaView(id=rank + 1, task="worker", index=rank, rank=rank, state=state, **fields)  # type: ignore[arg-type]


def running_job(*replicas: ReplicaView, **fields: object) -> JobView:
    base = JobView(id="j", state=JobState.RUNNING, replicas=replicas, started_at=0.0)
    return replace(base, **fields)  # type: ignore[arg-type]


def stopping_job(intent: StopIntent | None, *replicas: ReplicaView, **fields: object) -> JobView:
    base = running_job(*replicas, state=JobState.STOPPING, stop_intent=intent, signalled=True)
    return replace(base, **fields)  # type: ignore[arg-type]


def seen(*observations: Observation, checkpoint: float | None = None) -> Observations:
    return Observations({rank + 1: o for rank, o in enumerate(observations)}, checkpoint)


def exited(rank: int, code: int, stopping: bool = False, message: str = "") -> ReplicaEnded:
    text = f"replica worker[{rank}] (rank {rank}) exited with code {code}"
    return ReplicaEnded(
        rank + 1, ReplicaState.EXITED, code, text + message, not stopping and code != 0
    )


def lost(rank: int, stopping: bool = False) -> ReplicaEnded:
    how = "stopped" if stopping else "was lost"
    text = f"replica worker[{rank}] (rank {rank}) {how}: its pod was deleted"
    return ReplicaEnded(rank + 1, ReplicaState.LOST, None, text, not stopping)


# -- the table of rules ------------------------------------------------------------------------

# intent: (final state, returns to its queue, the attempt counts against backoffLimit, reason)
RULE_TABLE = {
    StopIntent.CANCEL: (JobState.CANCELLED, False, False, R.CANCELLED),
    StopIntent.PREEMPT: (JobState.PENDING, True, False, R.REQUEUED),
    StopIntent.REQUEUE: (JobState.PENDING, True, False, R.REQUEUED),
    StopIntent.LOST: (JobState.PENDING, True, False, R.REQUEUED),
    StopIntent.RESTART: (JobState.ADMITTED, False, True, R.RESTARTING),
    StopIntent.FAIL: (JobState.FAILED, False, True, R.FAILED),
    StopIntent.DEADLINE: (JobState.FAILED, False, True, R.FAILED),
}


def test_every_intent_has_one_rule() -> None:
    assert set(RULES) == set(StopIntent) == set(RULE_TABLE)


@pytest.mark.parametrize("intent", list(StopIntent))
def test_each_intent_ends_as_its_rule_says(intent: StopIntent) -> None:
    rule = RULES[intent]
    got = (rule.final_state, rule.requeues, rule.counts_attempt, rule.finish_reason)
    assert got == RULE_TABLE[intent]


def test_stored_values_never_change() -> None:
    """Rows written before keep reading: the enum's values are the strings stored."""
    assert [i.value for i in StopIntent] == [
        "cancel", "preempt", "requeue", "lost", "restart", "fail", "deadline"
    ]  # fmt: skip


def test_an_unknown_intent_is_refused() -> None:
    with pytest.raises(ValueError, match="'evict' is not a valid StopIntent"):
        StopIntent("evict")


# -- stopping jobs: every intent x replica outcome ---------------------------------------------


@dataclass
class StopCase:
    id: str
    replicas: tuple[ReplicaView, ...]
    observed: Observations
    ended: tuple[ReplicaEnded, ...]
    # the actions before the stop's end; then FinishStop (Relaunch for a restart) if it ends
    actions: tuple[JobAction, ...]
    ends: bool
    fields: dict[str, object] = field(default_factory=dict)


STOP_OUTCOMES = [
    StopCase("still-running", (replica(0),), seen(RUNNING), (), (), ends=False),
    StopCase(
        "still-running-not-asked-yet",
        (replica(0),),
        seen(RUNNING),
        (),
        (AskToStop(),),
        ends=False,
        fields={"signalled": False},
    ),
    StopCase(
        "grace-period-over",
        (replica(0), replica(1)),
        seen(RUNNING, RUNNING),
        (),
        (Kill(2),),
        ends=False,
        fields={"stop_deadline": NOW},
    ),
    StopCase(
        "not-asked-and-grace-over",
        (replica(0),),
        seen(RUNNING),
        (),
        (AskToStop(), Kill(1)),
        ends=False,
        fields={"signalled": False, "stop_deadline": NOW - 1},
    ),
    StopCase(
        "grace-not-over-yet",
        (replica(0),),
        seen(RUNNING),
        (),
        (),
        ends=False,
        fields={"stop_deadline": NOW + 1},
    ),
    StopCase("exited-0", (replica(0),), seen(EXIT_0), (exited(0, 0, True),), (), ends=True),
    StopCase(
        "exited-143",
        (replica(0),),
        seen(Observation(False, 143)),
        (exited(0, 143, True),),
        (),
        True,
    ),
    StopCase("lost", (replica(0),), seen(LOST), (lost(0, stopping=True),), (), ends=True),
    StopCase(
        "one-of-two-exited",
        (replica(0), replica(1)),
        seen(EXIT_1, RUNNING),
        (exited(0, 1, True),),
        (),
        ends=False,
    ),
    StopCase("no-replica-left", (), seen(), (), (), ends=True),
    StopCase(
        "already-exited-before",
        (replica(0, ReplicaState.EXITED, exit_code=1),),
        seen(),
        (),
        (),
        ends=True,
    ),
]


@pytest.mark.parametrize("intent", list(StopIntent))
@pytest.mark.parametrize("case", STOP_OUTCOMES, ids=lambda c: c.id)
def test_a_stopping_job(intent: StopIntent, case: StopCase) -> None:
    view = stopping_job(intent, *case.replicas, **case.fields)
    got = settle(view, case.observed, NOW)
    end: tuple[JobAction, ...] = ()
    if case.ends:
        end = (Relaunch(),) if intent is StopIntent.RESTART else (FinishStop(intent),)
    assert got == Settlement(ended=case.ended, actions=case.actions + end)


def test_a_stopping_job_with_no_intent_is_refused_not_failed() -> None:
    with pytest.raises(SettleRefused, match="job j is stopping with no stop intent"):
        settle(stopping_job(None, replica(0)), seen(EXIT_0), NOW)


def test_a_replica_not_observed_is_refused() -> None:
    with pytest.raises(SettleRefused, match=r"replica worker\[1\] \(rank 1\) was not observed"):
        settle(running_job(replica(0), replica(1)), seen(RUNNING), NOW)


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.ADMITTED, JobState.FAILED])
def test_a_job_neither_running_nor_stopping_is_refused(state: JobState) -> None:
    with pytest.raises(SettleRefused, match=f"job j is {state}"):
        settle(running_job(state=state), seen(), NOW)


# -- running jobs ------------------------------------------------------------------------------

ON_FAILURE = {"restart_policy": "OnFailure", "backoff_limit": 2}
FAILED_0 = "replica worker[0] (rank 0) exited with code 1"
WHY_NOT = f"{CANNOT_START}: ErrImagePull"


def begin(intent: StopIntent, message: str = FAILED_0) -> BeginStop:
    reason = R.DEADLINE_EXCEEDED if intent is StopIntent.DEADLINE else R.REPLICA_FAILED
    return BeginStop(intent, reason, message)


@dataclass
class RunCase:
    id: str
    view: JobView
    observed: Observations
    expected: Settlement


RUN_CASES = [
    RunCase("runs-on", running_job(replica(0)), seen(RUNNING), Settlement()),
    RunCase(
        "one-of-two-done",
        running_job(replica(0), replica(1)),
        seen(EXIT_0, RUNNING),
        Settlement(ended=(exited(0, 0),)),
    ),
    RunCase(
        "all-done",
        running_job(replica(0), replica(1)),
        seen(EXIT_0, EXIT_0),
        Settlement(ended=(exited(0, 0), exited(1, 0)), actions=(Succeed(),)),
    ),
    RunCase("no-replicas-succeeds", running_job(), seen(), Settlement(actions=(Succeed(),))),
    RunCase(
        "failed-never-restarts",
        running_job(replica(0)),
        seen(EXIT_1),
        Settlement(
            ended=(exited(0, 1),),
            actions=(begin(StopIntent.FAIL), FinishStop(StopIntent.FAIL)),
        ),
    ),
    RunCase(
        "failed-on-failure-restarts-the-others-stop-first",
        running_job(replica(0), replica(1), grace_period=30, **ON_FAILURE),
        seen(EXIT_1, RUNNING),
        Settlement(ended=(exited(0, 1),), actions=(begin(StopIntent.RESTART),)),
    ),
    RunCase(
        "failed-on-failure-alone-relaunches-at-once",
        running_job(replica(0), **ON_FAILURE),
        seen(EXIT_1),
        Settlement(ended=(exited(0, 1),), actions=(begin(StopIntent.RESTART), Relaunch())),
    ),
    RunCase(
        "retries-used-up-fails",
        running_job(replica(0), failed_attempts=2, **ON_FAILURE),
        seen(EXIT_1),
        Settlement(
            ended=(exited(0, 1),),
            actions=(begin(StopIntent.FAIL), FinishStop(StopIntent.FAIL)),
        ),
    ),
    RunCase(
        "last-retry-left-restarts",
        running_job(replica(0), failed_attempts=1, **ON_FAILURE),
        seen(EXIT_1),
        Settlement(ended=(exited(0, 1),), actions=(begin(StopIntent.RESTART), Relaunch())),
    ),
    RunCase(
        "cannot-start-not-retried",
        running_job(replica(0), **ON_FAILURE),
        seen(Observation(False, 128, message=WHY_NOT)),
        Settlement(
            ended=(exited(0, 128, message=f": {WHY_NOT}"),),
            actions=(
                begin(StopIntent.FAIL, f"{FAILED_0.replace('1', '128')}: {WHY_NOT}{NOT_RETRIED}"),
                FinishStop(StopIntent.FAIL),
            ),
        ),
    ),
    RunCase(
        "lost-requeues-and-never-counts",
        running_job(replica(0), failed_attempts=2, **ON_FAILURE),
        seen(LOST),
        Settlement(
            ended=(lost(0),),
            actions=(
                begin(StopIntent.LOST, lost(0).message),
                FinishStop(StopIntent.LOST),
            ),
        ),
    ),
    RunCase(
        "lost-and-exited-is-the-jobs-fault",
        running_job(replica(0), replica(1)),
        seen(LOST, EXIT_1),
        Settlement(
            ended=(lost(0), exited(1, 1)),
            actions=(begin(StopIntent.FAIL, lost(0).message), FinishStop(StopIntent.FAIL)),
        ),
    ),
    RunCase(
        "failed-in-an-earlier-pass-uses-the-jobs-message",
        running_job(
            replica(0, ReplicaState.EXITED, exit_code=2),
            replica(1),
            message="it broke",
            grace_period=30,
        ),
        seen(RUNNING, RUNNING),
        Settlement(actions=(begin(StopIntent.FAIL, "it broke"),)),
    ),
    RunCase(
        "at-max-runtime-runs-on",
        running_job(replica(0), max_runtime=NOW),
        seen(RUNNING),
        Settlement(),
    ),
    RunCase(
        "past-max-runtime-stops-with-grace",
        running_job(replica(0), max_runtime=NOW - 1, grace_period=30),
        seen(RUNNING),
        Settlement(actions=(begin(StopIntent.DEADLINE, "ran longer than maxRuntime (16m)"),)),
    ),
    RunCase(
        "past-max-runtime-no-grace-killed-at-once",
        running_job(replica(0), max_runtime=60, grace_period=0),
        seen(RUNNING),
        Settlement(
            actions=(begin(StopIntent.DEADLINE, "ran longer than maxRuntime (1m)"), Kill(1))
        ),
    ),
    RunCase(
        "newer-checkpoint-noted",
        running_job(replica(0), last_checkpoint_at=5.0),
        seen(RUNNING, checkpoint=7.0),
        Settlement(checkpoint_at=7.0),
    ),
    RunCase(
        "older-checkpoint-ignored",
        running_job(replica(0), last_checkpoint_at=7.0),
        seen(RUNNING, checkpoint=5.0),
        Settlement(),
    ),
    RunCase(
        "starts-waiting-with-an-event",
        running_job(replica(0)),
        seen(Observation(True, message="pulling its image")),
        Settlement(
            waiting=(
                WaitingChanged(
                    1, "pulling its image", "replica worker[0] (rank 0) is pulling its image"
                ),
            )
        ),
    ),
    RunCase(
        "waits-no-more-without-an-event",
        running_job(replica(0, waiting="pulling its image")),
        seen(RUNNING),
        Settlement(waiting=(WaitingChanged(1, None),)),
    ),
]


def launcher(state: ReplicaState = ReplicaState.RUNNING, **fields: object) -> ReplicaView:
    """Rank 0 of an MPI job: the task that decides it."""
    return replace(replica(0, state, **fields), task="launcher")


def launched_ended(code: int) -> ReplicaEnded:
    text = f"replica launcher[0] (rank 0) exited with code {code}"
    return ReplicaEnded(1, ReplicaState.EXITED, code, text, code != 0)


MPI = {"decided_by": "launcher"}
LAUNCHER_DONE = "task launcher exited with code 0; the others were stopped"

RUN_CASES += [
    RunCase(
        "mpi-launcher-exits-0-succeeds-while-workers-run",
        running_job(launcher(), replica(1), replica(2), **MPI),
        seen(EXIT_0, RUNNING, RUNNING),
        Settlement(ended=(launched_ended(0),), actions=(Succeed(LAUNCHER_DONE),)),
    ),
    RunCase(
        "mpi-launcher-exited-0-before-succeeds-now",
        running_job(launcher(ReplicaState.EXITED, exit_code=0), replica(1), **MPI),
        seen(RUNNING, RUNNING),
        Settlement(actions=(Succeed(LAUNCHER_DONE),)),
    ),
    RunCase(
        "mpi-workers-alone-done-wait-for-the-launcher",
        running_job(launcher(), replica(1), **MPI),
        seen(RUNNING, EXIT_0),
        Settlement(ended=(exited(1, 0),)),
    ),
    RunCase(
        "mpi-launcher-fails-the-job",
        running_job(launcher(), replica(1), grace_period=30, **MPI),
        seen(EXIT_1, RUNNING),
        Settlement(
            ended=(launched_ended(1),),
            actions=(begin(StopIntent.FAIL, launched_ended(1).message),),
        ),
    ),
    RunCase(
        "mpi-worker-failing-as-the-launcher-ends-fails-the-job",
        running_job(launcher(), replica(1), grace_period=30, **MPI),
        seen(EXIT_0, EXIT_1),
        Settlement(
            ended=(launched_ended(0), exited(1, 1)),
            actions=(begin(StopIntent.FAIL, exited(1, 1).message), FinishStop(StopIntent.FAIL)),
        ),
    ),
    RunCase(
        "without-a-decider-a-launcher-task-is-one-of-the-replicas",
        running_job(launcher(), replica(1)),
        seen(EXIT_0, RUNNING),
        Settlement(ended=(launched_ended(0),)),
    ),
]


@pytest.mark.parametrize("case", RUN_CASES, ids=lambda c: c.id)
def test_a_running_job(case: RunCase) -> None:
    assert settle(case.view, case.observed, NOW) == case.expected


@pytest.mark.parametrize(
    ("failed_before", "backoff_limit", "intent"),
    [
        (0, 0, StopIntent.FAIL),
        (0, 1, StopIntent.RESTART),
        (1, 1, StopIntent.FAIL),
        (2, 3, StopIntent.RESTART),
        (3, 3, StopIntent.FAIL),
    ],
)
def test_only_the_jobs_own_failures_count_against_its_backoff_limit(
    failed_before: int, backoff_limit: int, intent: StopIntent
) -> None:
    """Attempts ended by preemption, a lost replica or an unhealthy node are not in
    ``failed_attempts``: only the job's own failures use up its retries."""
    view = running_job(
        replica(0),
        restart_policy="OnFailure",
        backoff_limit=backoff_limit,
        failed_attempts=failed_before,
    )
    (first, *_) = settle(view, seen(EXIT_1), NOW).actions
    assert isinstance(first, BeginStop) and first.intent is intent


@pytest.mark.parametrize(
    ("intent", "message"),
    [
        (StopIntent.RESTART, "boom; restarting"),
        (StopIntent.PREEMPT, "boom; it returns to its queue"),
        (StopIntent.REQUEUE, "boom; it returns to its queue"),
        (StopIntent.LOST, "boom; it returns to its queue"),
        (StopIntent.FAIL, "boom"),
        (StopIntent.DEADLINE, "boom"),
        (StopIntent.CANCEL, "boom"),
    ],
)
def test_the_event_that_begins_a_stop_says_what_follows(intent: StopIntent, message: str) -> None:
    assert BeginStop(intent, R.PREEMPTED, "boom").event_message == message


# -- the executor stops a settlement asks for ----------------------------------------------------


def polite(*ranks: int) -> tuple[ReplicaStop, ...]:
    return tuple(ReplicaStop(rank + 1, force=False) for rank in ranks)


def forced(*ranks: int) -> tuple[ReplicaStop, ...]:
    return tuple(ReplicaStop(rank + 1, force=True) for rank in ranks)


@pytest.mark.parametrize(
    ("view", "settlement", "stops"),
    [
        pytest.param(
            running_job(replica(0), replica(1)), Settlement(), (), id="nothing to do: no stop"
        ),
        pytest.param(
            running_job(replica(0), replica(1)),
            Settlement(ended=(exited(0, 1),), actions=(begin(StopIntent.FAIL),)),
            polite(1),
            id="a failure begins a stop: the replica still running is asked",
        ),
        pytest.param(
            stopping_job(StopIntent.CANCEL, replica(0), replica(1)),
            Settlement(actions=(AskToStop(),)),
            polite(0, 1),
            id="a cancel: every running replica asked",
        ),
        pytest.param(
            stopping_job(StopIntent.CANCEL, replica(0), replica(1, ReplicaState.EXITED)),
            Settlement(actions=(Kill(1),)),
            forced(0),
            id="grace over: the one still running killed",
        ),
        pytest.param(
            running_job(replica(0), replica(1)),
            Settlement(ended=(exited(0, 0), exited(1, 0)), actions=(Succeed(),)),
            forced(0, 1),
            id="success: every replica of the attempt made sure of",
        ),
        pytest.param(
            running_job(replica(0, ReplicaState.EXITED), replica(1)),
            Settlement(ended=(exited(1, 1),), actions=(Relaunch(),)),
            forced(0, 1),
            id="a relaunch: nothing of the last attempt left",
        ),
        pytest.param(
            stopping_job(StopIntent.PREEMPT, replica(0), replica(1)),
            Settlement(
                ended=(lost(0, stopping=True), lost(1, stopping=True)),
                actions=(FinishStop(StopIntent.PREEMPT),),
            ),
            forced(0, 1),
            id="a stop finished: every replica made sure of",
        ),
    ],
)
def test_the_stops_a_settlement_asks_for(
    view: JobView, settlement: Settlement, stops: tuple[ReplicaStop, ...]
) -> None:
    assert stops_of(view, settlement) == stops
