"""The waits of one cycle, made when first read.

The cycle judges only the jobs it must (``core.schedule``); the jobs behind a StrictFIFO
queue's blocked head are not visited one by one. ``Waits`` numbers every waiting job, and gives
those behind a blocked head their shared ``BlockedByQueueHead``, by replaying the fair order
with the judged jobs' outcomes: the same waits, positions and reasons as visiting each job, paid
for only by a reader.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from kiban.scheduler.decisions import Admit, Wait
from kiban.scheduler.fair_order import fair_order
from kiban.scheduler.fair_tree import FairTree
from kiban.scheduler.policy import Policy
from kiban.scheduler.reasons import PendingReason, ReasonCode
from kiban.scheduler.snapshot import PendingJob, QueueStrategy, QueueView, Snapshot


@dataclass(slots=True)
class Waiting:
    """Why a job visited waits (the cycle numbers its positions)."""

    reason: PendingReason
    reserved_at: float | None = None


Visit = tuple[PendingJob, Admit | Waiting, float]
"""A job the cycle judged: admitted (with the charge to its tenant's standing) or waiting (with
no charge). A plain tuple: the cycle makes one per job it visits."""


class Waits(Sequence[Wait]):
    """The cycle's waits, numbered in the order the cycle visits the waiting, made when first read.

    The cycle judges only the jobs it must: the jobs behind a StrictFIFO queue's blocked head
    are not visited one by one (in a contended cluster they are most of the backlog, and a
    cycle that explained each of them cost as much as the backlog is long). Their wait, the
    same ``BlockedByQueueHead`` for all, and every job's positions are found here, by replaying
    the fair order over all the pending jobs with the judged jobs' outcomes: the same waits,
    positions and reasons as visiting each job, paid for only by a reader (the control loop
    records them; the simulator reads only the few it needs).
    """

    __slots__ = ("_made", "_more", "_policy", "_snapshot", "_visits")

    def __init__(
        self, snapshot: Snapshot, policy: Policy, visits: tuple[Visit, ...], more: bool
    ) -> None:
        self._snapshot = snapshot
        self._policy = policy
        self._visits = visits
        self._more = more
        self._made: tuple[Wait, ...] | None = None

    def judged(self) -> Iterator[tuple[str, PendingReason]]:
        """(job id, reason) of the waiting jobs the cycle judged itself, without numbering
        them: preemptors and queue heads, never the jobs behind a blocked head."""
        for job, outcome, _charge in self._visits:
            if isinstance(outcome, Waiting):
                yield job.id, outcome.reason

    def over_budget(self) -> bool:
        """Whether, visiting every job, the cycle would have stopped at its placement budget
        with jobs left (then they wait as unconsidered, and these waits say so)."""
        made, stopped = _replay(self._snapshot, self._policy, self._visits, stop=True)
        self._made, self._more = made, stopped
        return stopped

    def _all(self) -> tuple[Wait, ...]:
        if self._made is None:
            self._made, _ = _replay(self._snapshot, self._policy, self._visits, stop=self._more)
        return self._made

    def __len__(self) -> int:
        return len(self._all())

    @overload
    def __getitem__(self, index: int) -> Wait: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Wait]: ...
    def __getitem__(self, index: int | slice) -> Wait | Sequence[Wait]:
        return self._all()[index]

    def __iter__(self) -> Iterator[Wait]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Waits):
            return self._all() == other._all()
        return self._all() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._all())


def judged_reasons(waiting: Sequence[Wait]) -> Iterator[tuple[str, PendingReason]]:
    """(job id, reason) of waiting jobs, without numbering the jobs behind blocked StrictFIFO
    heads when ``schedule`` left them unread: every job that preempted or holds nominated
    nodes is among them (the cycle judges those first)."""
    if isinstance(waiting, Waits):
        yield from waiting.judged()
    else:
        for wait in waiting:
            yield wait.job_id, wait.reason


def _replay(
    snapshot: Snapshot, policy: Policy, visits: tuple[Visit, ...], *, stop: bool
) -> tuple[tuple[Wait, ...], bool]:
    """Every waiting job's ``Wait``: the fair order again over all pending jobs, each judged
    job's outcome as the cycle found it, the standings charged as its admissions charged them,
    and the jobs behind a blocked StrictFIFO head waiting for it (``schedule`` step 8). With
    ``stop``, the jobs after the placement budget was spent are unconsidered; the second value
    says whether there were any."""
    queues = {q.name: q for q in snapshot.queues}
    charged: dict[str, float] = {}
    base = snapshot.standings

    def standing(tenant: str) -> float:
        return base.get(tenant, 0.0) + charged.get(tenant, 0.0)

    budget = policy.max_placements_per_cycle
    judged = {visit[0].id: visit for visit in visits}
    blocked: dict[str, PendingReason] = {}
    waits: list[Wait] = []
    in_queue: dict[str, int] = {}
    considered: set[str] = set()
    placed = 0
    stopped = False
    members = FairTree.of(snapshot, policy.admission_charge_s)
    for job in fair_order(snapshot, queues, policy.order_key, standing, None, members):
        if stop and budget is not None and placed >= budget:
            stopped = True
            break
        considered.add(job.id)
        visit = judged.get(job.id)
        if visit is None:  # behind a blocked head: the cycle never visited it
            reason = blocked.get(job.queue)
            assert reason is not None, f"{job.id} was neither judged nor behind a blocked head"
            _add_wait(waits, in_queue, job, reason)
            continue
        _job, outcome, charge = visit
        if isinstance(outcome, Admit):
            placed += len(outcome.placements)
            charged[job.tenant] = charged.get(job.tenant, 0.0) + charge
            continue
        _add_wait(waits, in_queue, job, outcome.reason, outcome.reserved_at)
        queue = queues.get(job.queue)
        if (
            queue is not None
            and job.queue not in blocked
            and queue.strategy is QueueStrategy.STRICT_FIFO
            and outcome.reason.code is not ReasonCode.UNSCHEDULABLE
        ):
            blocked[job.queue] = blocked_by_head(queue, job.id)
    if stopped:  # the rest wait for the next cycle, in the snapshot's order
        assert budget is not None
        reason = _over_budget(budget)
        for job in snapshot.pending:
            if job.id not in considered:
                _add_wait(waits, in_queue, job, reason)
    return tuple(waits), stopped


def _add_wait(
    waits: list[Wait],
    in_queue: dict[str, int],
    job: PendingJob,
    reason: PendingReason,
    reserved_at: float | None = None,
) -> None:
    """The job waits; its positions are the order in which the cycle visited the waiting."""
    position = in_queue[job.queue] = in_queue.get(job.queue, 0) + 1
    waits.append(Wait(job.id, reason, position, len(waits) + 1, reserved_at))


def blocked_by_head(queue: QueueView, head: str) -> PendingReason:
    return PendingReason(
        ReasonCode.BLOCKED_BY_QUEUE_HEAD,
        f"queue {queue.name} is StrictFIFO and job {head} ahead of it cannot start yet",
        {"queue": queue.name, "head": head},
    )


def _over_budget(budget: int) -> PendingReason:
    return PendingReason(
        ReasonCode.QUEUE_BACKLOG,
        f"not yet considered: this cycle stopped after placing {budget} replicas; the next "
        f"cycle follows at once",
        {"cycle_budget": budget},
    )
