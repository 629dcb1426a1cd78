"""What to do with a notebook, decided from what was observed of it: a pure function.

The notebook controller gathers each active notebook's job state and Jupyter's own activity
report (``/api/status``: ``last_activity``; ``/api/kernels``: each kernel's
``execution_state``), then ``decide`` says whether it became ready, stays, is culled, failed
to come up in time, or ended. A busy kernel is never culled.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kiban.domain.notebook import NotebookState
from kiban.domain.states import JobState


@dataclass(frozen=True)
class JupyterActivity:
    """What a notebook's server said of itself: when it was last active (UNIX seconds),
    how many kernels are executing now, and its open connections."""

    last_activity: float
    busy_kernels: int = 0
    connections: int = 0


@dataclass(frozen=True)
class NotebookObservation:
    """One active notebook as a pass saw it (``activity`` None: its server did not answer)."""

    state: NotebookState
    job_state: JobState | None
    job_started_at: float | None
    ready_at: float | None
    idle_timeout_s: float
    activity: JupyterActivity | None


class NotebookAction(StrEnum):
    KEEP = "keep"  # nothing to change
    READY = "ready"  # its server answers: Running
    ACTIVE = "active"  # running; record its last activity
    CULL = "cull"  # idle longer than its idleTimeout: stop its job, keep its directory
    NOT_READY = "not-ready"  # its server did not answer in time: stop its job, Failed
    ENDED = "ended"  # its job ended (stopped, culled, maxLifetime): Stopped
    FAILED = "failed"  # its job failed: Failed


@dataclass(frozen=True)
class NotebookDecision:
    action: NotebookAction
    last_activity: float | None = None
    idle_s: float = 0.0


def decide(seen: NotebookObservation, now: float, ready_timeout_s: float) -> NotebookDecision:
    """The action for one notebook at ``now`` (see ``NotebookAction``)."""
    if not seen.state.active:
        return NotebookDecision(NotebookAction.KEEP)
    if seen.job_state is None or seen.job_state.terminal:
        failed = seen.job_state is JobState.FAILED
        return NotebookDecision(NotebookAction.FAILED if failed else NotebookAction.ENDED)
    if seen.job_state is not JobState.RUNNING:
        return NotebookDecision(NotebookAction.KEEP)  # waiting in its queue, or stopping
    if seen.activity is None:
        started = seen.job_started_at if seen.job_started_at is not None else now
        if seen.state is NotebookState.STARTING and now - started > ready_timeout_s:
            return NotebookDecision(NotebookAction.NOT_READY)
        return NotebookDecision(NotebookAction.KEEP)
    # Jupyter's last activity, but never before the server was ready (a notebook started
    # again reports its server's start, which is now).
    last = max(seen.activity.last_activity, seen.ready_at or now)
    idle = now - last
    if seen.state is NotebookState.STARTING:
        return NotebookDecision(NotebookAction.READY, last_activity=last)
    if seen.activity.busy_kernels == 0 and idle > seen.idle_timeout_s:
        return NotebookDecision(NotebookAction.CULL, last_activity=last, idle_s=idle)
    if seen.activity.busy_kernels > 0:
        last = now  # a kernel executing is activity, whatever Jupyter's clock says
    return NotebookDecision(NotebookAction.ACTIVE, last_activity=last, idle_s=now - last)
