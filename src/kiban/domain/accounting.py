"""Usage accounting: what one attempt of a job or one service replica held, and how it ended.

Unlike fair share's decayed usage (``kiban.domain.usage``), an accounting record is never
decayed: it says who held which resources from when to when, as Slurm's ``sacct`` does, so
usage can be reported, priced and held against budgets after the fact.
"""

from __future__ import annotations

from enum import StrEnum


class UsageKind(StrEnum):
    """What a usage record is of: one attempt of a job (all its replicas), or one replica of an
    inference service."""

    JOB = "job"
    SERVICE = "service"


class AttemptOutcome(StrEnum):
    """How the attempt a usage record covers ended (None on the record while it runs)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"
    NODE_LOST = "node-lost"  # its node failed or went away under it (work lost with a node)
    STOPPED = "stopped"  # a service replica scaled down or replaced, or a job stopped otherwise
