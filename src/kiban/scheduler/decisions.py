"""What a scheduling cycle decides: which jobs start where, and why the others wait."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kiban.scheduler.reasons import PendingReason
from kiban.scheduler.snapshot import DEFAULT_FLAVOR, NO_EXTENDED, Extended


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """One replica on one node: its task, index within the task, global rank and GPU ids."""

    task: str
    index: int
    rank: int
    node: str
    gpu_ids: tuple[int, ...]
    cpu_millis: int
    memory: int
    extended: Extended = NO_EXTENDED


@dataclass(frozen=True, slots=True)
class Admit:
    """Start this job with these placements (all of its gang, committed together)."""

    job_id: str
    placements: tuple[ReplicaPlacement, ...]
    flavor: str = DEFAULT_FLAVOR


@dataclass(frozen=True, slots=True)
class Wait:
    """This job stays pending, for this reason; its 1-based positions in its queue and cluster.

    ``reserved_at`` is when its reservation starts (backfill), if it holds one.
    """

    job_id: str
    reason: PendingReason
    queue_position: int
    cluster_position: int = 0
    reserved_at: float | None = None


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop ``victim`` (it returns to its queue) so that ``preemptor`` can start."""

    victim_id: str
    preemptor_id: str
    reason: PendingReason
    nodes: tuple[str, ...] = ()  # where the preemptor is to start: nominated for it


@dataclass(frozen=True, slots=True)
class Decisions:
    """The outcome of one cycle, in the order the core made them.

    ``more``: the cycle stopped at its placement budget with jobs it did not consider; the
    caller should run the next cycle at once. ``waiting`` may be made only when first read
    (``schedule`` numbers the jobs behind a blocked StrictFIFO head then).
    """

    admitted: tuple[Admit, ...]
    waiting: Sequence[Wait]
    preempted: tuple[Preempt, ...] = ()
    more: bool = False
