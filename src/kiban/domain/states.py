"""Job and replica states, and which moves between them are allowed."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """Where a job is in its life; terminal states never change again."""

    PENDING = "Pending"
    ADMITTED = "Admitted"  # placed by the scheduler; replicas are being launched
    RUNNING = "Running"
    STOPPING = "Stopping"  # replicas are being stopped; see the job's stop intent
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @classmethod
    def _missing_(cls, value: object) -> JobState | None:
        """A state named in any case (``running``, ``RUNNING``): people type them so."""
        if isinstance(value, str):
            return _BY_WORD.get(value.strip().lower())
        return None

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def holds_resources(self) -> bool:
        """Whether a job in this state has GPUs, CPUs and memory allocated to it."""
        return self in (JobState.ADMITTED, JobState.RUNNING, JobState.STOPPING)


_BY_WORD = {state.value.lower(): state for state in JobState}

TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.ADMITTED, JobState.CANCELLED, JobState.FAILED}),
    JobState.ADMITTED: frozenset(
        {JobState.RUNNING, JobState.PENDING, JobState.FAILED, JobState.STOPPING, JobState.CANCELLED}
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.STOPPING,
            JobState.PENDING,
            JobState.ADMITTED,
        }
    ),
    JobState.STOPPING: frozenset(
        {JobState.CANCELLED, JobState.PENDING, JobState.FAILED, JobState.ADMITTED}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class ReplicaState(StrEnum):
    """A replica's process: launched and alive, or exited."""

    RUNNING = "Running"
    EXITED = "Exited"
    LOST = "Lost"
