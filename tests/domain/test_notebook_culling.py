"""The culling decision: a table of notebooks observed at one moment and what becomes of each.
A kernel that executes is never culled, however long ago Jupyter last saw activity."""

from __future__ import annotations

import pytest

from kiban.domain.notebook import NotebookState
from kiban.domain.notebook_culling import (
    JupyterActivity,
    NotebookAction,
    NotebookObservation,
    decide,
)
from kiban.domain.states import JobState

NOW = 10_000.0
READY_TIMEOUT = 120.0


def seen(
    state: NotebookState = NotebookState.RUNNING,
    job: JobState | None = JobState.RUNNING,
    *,
    idle_for: float | None = None,
    busy: int = 0,
    started_ago: float = 1000.0,
    ready_ago: float | None = 900.0,
    idle_timeout: float = 60.0,
) -> NotebookObservation:
    activity = None
    if idle_for is not None:
        activity = JupyterActivity(last_activity=NOW - idle_for, busy_kernels=busy)
    return NotebookObservation(
        state=state,
        job_state=job,
        job_started_at=NOW - started_ago,
        ready_at=None if ready_ago is None else NOW - ready_ago,
        idle_timeout_s=idle_timeout,
        activity=activity,
    )


CASES = [
    ("active recently", seen(idle_for=10), NotebookAction.ACTIVE),
    ("idle past its timeout", seen(idle_for=61), NotebookAction.CULL),
    ("idle exactly its timeout", seen(idle_for=60), NotebookAction.ACTIVE),
    ("busy kernel, idle for hours", seen(idle_for=7200, busy=1), NotebookAction.ACTIVE),
    ("two busy kernels", seen(idle_for=7200, busy=2), NotebookAction.ACTIVE),
    # started again a moment ago: Jupyter's old activity does not count against it
    ("ready just now", seen(idle_for=7200, ready_ago=5), NotebookAction.ACTIVE),
    ("server silent while running", seen(idle_for=None), NotebookAction.KEEP),
    ("starting, server answers", seen(NotebookState.STARTING, idle_for=0), NotebookAction.READY),
    (
        "starting, silent within the timeout",
        seen(NotebookState.STARTING, started_ago=60, ready_ago=None),
        NotebookAction.KEEP,
    ),
    (
        "starting, silent past the timeout",
        seen(NotebookState.STARTING, started_ago=121, ready_ago=None),
        NotebookAction.NOT_READY,
    ),
    (
        "starting, waiting in its queue for hours",
        seen(NotebookState.STARTING, JobState.PENDING, started_ago=9000, ready_ago=None),
        NotebookAction.KEEP,
    ),
    ("job stopping", seen(job=JobState.STOPPING, idle_for=7200), NotebookAction.KEEP),
    ("job cancelled", seen(job=JobState.CANCELLED), NotebookAction.ENDED),
    ("job ran past maxLifetime", seen(job=JobState.FAILED), NotebookAction.FAILED),
    ("job gone", seen(job=None), NotebookAction.ENDED),
    ("already stopped", seen(NotebookState.STOPPED, idle_for=7200), NotebookAction.KEEP),
]


@pytest.mark.parametrize(
    ("observation", "action"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_decide(observation: NotebookObservation, action: NotebookAction) -> None:
    assert decide(observation, NOW, READY_TIMEOUT).action is action


def test_a_culled_notebook_reports_how_long_it_was_idle() -> None:
    decision = decide(seen(idle_for=90), NOW, READY_TIMEOUT)
    assert (decision.action, decision.idle_s) == (NotebookAction.CULL, 90.0)
