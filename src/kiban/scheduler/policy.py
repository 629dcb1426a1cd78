"""The core's extension points. Issue-by-issue, policy grows here rather than in the cycle.

``order_key`` sorts pending jobs: lower keys are considered first. Within a queue the default is
priority (higher first), then submit time, then id, so that ordering is total and deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiban.scheduler.snapshot import PendingJob

OrderKey = Callable[[PendingJob], tuple[float | int | str, ...]]


def priority_then_fifo(job: PendingJob) -> tuple[float | int | str, ...]:
    """Higher priority first, then first come, first served."""
    return (-job.priority, job.submitted_at, job.id)


@dataclass(frozen=True)
class Policy:
    """How the core orders work; placement is best-fit with all-or-nothing gangs."""

    order_key: OrderKey = priority_then_fifo


DEFAULT_POLICY = Policy()
