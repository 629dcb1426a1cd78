"""Why a job is stopping, and the one table of what each reason to stop ends in.

A job in ``Stopping`` carries its intent (``jobs.stop_intent``); once its replicas are gone
the intent's rule says the state it ends in, whether it returns to its queue, whether the
attempt counts against its ``backoffLimit``, and the event that says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kiban.domain.event_reasons import JobEventReason
from kiban.domain.states import JobState


class StopIntent(StrEnum):
    """Why a job's replicas are being stopped. The values are stored; they never change."""

    CANCEL = "cancel"  # a user cancelled it
    PREEMPT = "preempt"  # the scheduler preempted it for another job
    REQUEUE = "requeue"  # a node it runs on became unhealthy
    LOST = "lost"  # its replicas vanished (their pod or node): no fault of its own
    RESTART = "restart"  # a replica failed and restartPolicy OnFailure allows another attempt
    FAIL = "fail"  # a replica failed and no other attempt is allowed
    DEADLINE = "deadline"  # it ran longer than its maxRuntime


@dataclass(frozen=True, slots=True)
class StopRule:
    """What stopping for one intent leads to.

    ``begin_suffix`` ends the message of the event that starts the stop. ``finish_message``
    is the message of the event that ends it (``{preempted_by}`` and ``{queue}`` filled in);
    None: the job's own message (what made it fail). ``counts_attempt``: the attempt's end is
    the job's own failure, counted against its ``backoffLimit``.
    """

    final_state: JobState
    counts_attempt: bool
    finish_reason: JobEventReason
    finish_message: str | None
    finish_warning: bool = False
    begin_suffix: str = ""

    @property
    def requeues(self) -> bool:
        """It returns to its queue (with its original submit time) to start anew."""
        return self.final_state is JobState.PENDING

    @property
    def relaunches(self) -> bool:
        """It starts again at once, on the nodes it held."""
        return self.final_state is JobState.ADMITTED

    @property
    def next_attempt(self) -> bool:
        """Its replicas start again later under the next attempt number."""
        return not self.final_state.terminal


BACK_IN_QUEUE = "; it returns to its queue"

RULES: dict[StopIntent, StopRule] = {
    StopIntent.CANCEL: StopRule(
        JobState.CANCELLED, False, JobEventReason.CANCELLED, "all replicas stopped"
    ),
    StopIntent.PREEMPT: StopRule(
        JobState.PENDING,
        False,
        JobEventReason.REQUEUED,
        "preempted by job {preempted_by}; waits in queue {queue} again",
        begin_suffix=BACK_IN_QUEUE,
    ),
    StopIntent.REQUEUE: StopRule(
        JobState.PENDING,
        False,
        JobEventReason.REQUEUED,
        "its node became unhealthy; waits in queue {queue} again",
        begin_suffix=BACK_IN_QUEUE,
    ),
    StopIntent.LOST: StopRule(
        JobState.PENDING,
        False,
        JobEventReason.REQUEUED,
        "a replica was lost; waits in queue {queue} again",
        begin_suffix=BACK_IN_QUEUE,
    ),
    StopIntent.RESTART: StopRule(
        JobState.ADMITTED,
        True,
        JobEventReason.RESTARTING,
        None,
        begin_suffix="; restarting",
    ),
    StopIntent.FAIL: StopRule(
        JobState.FAILED, True, JobEventReason.FAILED, None, finish_warning=True
    ),
    StopIntent.DEADLINE: StopRule(
        JobState.FAILED, True, JobEventReason.FAILED, None, finish_warning=True
    ),
}
"""Every intent's rule; a test checks that each intent has one."""


def rule_for(intent: StopIntent) -> StopRule:
    return RULES[intent]
