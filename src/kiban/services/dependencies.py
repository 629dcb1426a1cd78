"""Dependencies between jobs (``spec.dependsOn``, ``kiban run --after``): checked and stored at
submission, resolved as the jobs they name end.

A dependency names a job or an array (then its condition is over all its indices), and how it
must end (``DependencyCondition``). Until every one holds, the dependent is held from the
scheduler (``JobGate.DEPENDENCY``) and shows ``WaitingForDependency`` naming the job it waits
for; once one can never hold, the dependent fails (``DependencyNeverSatisfied``). Only
unresolved dependencies are stored, so resolving them reads those rows and the states of the
jobs they name, never every job.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from kiban.domain.event_reasons import JobEventReason
from kiban.domain.job_relations import (
    Dependency,
    DependencyCondition,
    DependencyTarget,
    JobGate,
    is_index_of,
)
from kiban.domain.states import TERMINAL, JobState
from kiban.scheduler.reasons import ReasonCode
from kiban.services.auth import Principal
from kiban.services.errors import NotFound, invalid
from kiban.services.jobs import is_job_id
from kiban.services.transitions import transition
from kiban.store.models import Job, JobArray, JobDependency

_UNENDED = tuple(s.value for s in JobState if s not in TERMINAL)
_ENDED_UNSUCCESSFUL = tuple(s.value for s in TERMINAL if s is not JobState.SUCCEEDED)
_PHRASE = {
    DependencyCondition.SUCCEEDED: "succeed",
    DependencyCondition.FAILED: "end without succeeding",
    DependencyCondition.FINISHED: "end",
}


def resolve_targets(
    session: Session,
    principal: Principal,
    depends_on: Sequence[Dependency],
    own_id: str,
    source_path: Any = None,
) -> list[DependencyTarget]:
    """The jobs and arrays ``depends_on`` names, each one the caller may see; a dependency on
    the submission itself (or an index of it) is refused, one on a job that does not exist
    or is another tenant's is NotFound (404). ``source_path`` maps a field to how the
    submitted file wrote it."""
    where = source_path or (lambda path: path)
    targets: list[DependencyTarget] = []
    for i, dependency in enumerate(depends_on):
        field = where(f"spec.dependsOn[{i}].job")
        name = dependency.job
        if name == own_id or is_index_of(name, own_id):
            raise invalid(field, f"{name} is this submission itself: a job cannot wait for itself")
        if any(t.id == name for t in targets):
            raise invalid(field, f"{name} is named twice in dependsOn")
        job = session.get(Job, name) if is_job_id(name) else None
        if job is not None and principal.can_see(job.tenant):
            targets.append(DependencyTarget(name, False, dependency.condition, i))
            continue
        array = session.get(JobArray, name) if is_job_id(name) else None
        if array is not None and principal.can_see(array.tenant):
            targets.append(DependencyTarget(name, True, dependency.condition, i))
            continue
        raise NotFound(f"{field}: no job or array {name} (among the jobs you may see)")
    return targets


def waiting_message(target: DependencyTarget | JobDependency) -> str:
    """What a held dependent's reason says: the job (or array) it waits for, and the end."""
    condition = DependencyCondition(target.condition)
    is_array = target.target_is_array if isinstance(target, JobDependency) else target.is_array
    name = target.target if isinstance(target, JobDependency) else target.id
    what = f"every index of array {name}" if is_array else f"job {name}"
    if is_array and condition is DependencyCondition.FAILED:
        return f"waits for array {name} to end with some index not succeeding"
    return f"waits for {what} to {_PHRASE[condition]}"


def dependency_rows(
    dependent: str, dependent_is_array: bool, targets: Sequence[DependencyTarget]
) -> list[dict[str, Any]]:
    """The rows storing ``targets`` as the dependencies of ``dependent`` (a bulk insert's)."""
    return [
        {
            "dependent": dependent,
            "target": t.id,
            "dependent_is_array": dependent_is_array,
            "target_is_array": t.is_array,
            "condition": t.condition.value,
            "position": t.position,
        }
        for t in targets
    ]


class Verdict(Enum):
    """Where a dependency stands: it holds, it may yet hold, or it never will."""

    HOLDS = "holds"
    WAIT = "wait"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the job or array a dependency names stands: ``ended`` (all its indices), and
    whether it (or some index) ended without succeeding; ``state`` of a job; ``missing``: gone."""

    ended: bool
    some_unsuccessful: bool
    state: str | None = None
    missing: bool = False


def verdict(condition: DependencyCondition, outcome: Outcome) -> Verdict:
    """Whether ``condition`` holds on ``outcome``, may yet, or never will (pure)."""
    if outcome.missing:
        return Verdict.NEVER
    if condition is DependencyCondition.SUCCEEDED and outcome.some_unsuccessful:
        return Verdict.NEVER  # one index failed: every index can no longer succeed
    if not outcome.ended:
        return Verdict.WAIT
    if condition is DependencyCondition.FINISHED:
        return Verdict.HOLDS
    succeeded = not outcome.some_unsuccessful
    wanted = condition is DependencyCondition.SUCCEEDED
    return Verdict.HOLDS if succeeded == wanted else Verdict.NEVER


def _describe(outcome: Outcome, edge: JobDependency) -> str:
    if outcome.missing:
        return f"{edge.target} no longer exists"
    if edge.target_is_array:
        if outcome.some_unsuccessful:
            return f"an index of array {edge.target} ended without succeeding"
        return f"every index of array {edge.target} succeeded"
    return f"job {edge.target} ended {outcome.state}"


def _outcomes(session: Session, edges: Sequence[JobDependency]) -> dict[str, Outcome]:
    """The outcome of each job and array the edges name: jobs by key, arrays by two indexed
    probes each (is any index still to end? did any end without succeeding?)."""
    outcomes: dict[str, Outcome] = {}
    job_ids = {e.target for e in edges if not e.target_is_array}
    for job_id, state in session.execute(select(Job.id, Job.state).where(Job.id.in_(job_ids))):
        ended = JobState(state).terminal
        unsuccessful = ended and state != JobState.SUCCEEDED.value
        outcomes[job_id] = Outcome(ended, unsuccessful, state)
    for job_id in job_ids - outcomes.keys():
        outcomes[job_id] = Outcome(True, True, missing=True)
    for array_id in {e.target for e in edges if e.target_is_array}:
        if session.get(JobArray, array_id) is None:
            outcomes[array_id] = Outcome(True, True, missing=True)
            continue
        unended = session.scalar(
            select(Job.id).where(Job.array_id == array_id, Job.state.in_(_UNENDED)).limit(1)
        )
        unsuccessful = session.scalar(
            select(Job.id)
            .where(Job.array_id == array_id, Job.state.in_(_ENDED_UNSUCCESSFUL))
            .limit(1)
        )
        outcomes[array_id] = Outcome(unended is None, unsuccessful is not None)
    return outcomes


def resolve(session: Session, now: float) -> bool:
    """Release the dependents whose dependencies all hold, fail those with one that never
    will, and drop the dependencies of dependents no longer waiting. True if anything was
    released or failed (the caller commits)."""
    edges = list(session.scalars(select(JobDependency).order_by(JobDependency.position)))
    if not edges:
        return False
    by_dependent: dict[str, list[JobDependency]] = defaultdict(list)
    for edge in edges:
        by_dependent[edge.dependent].append(edge)
    waiting = _still_waiting(session, by_dependent)
    outcomes = _outcomes(session, edges)
    changed = False
    for dependent, own in by_dependent.items():
        if dependent not in waiting:
            _drop(session, dependent)
            continue
        verdicts = [
            (edge, verdict(DependencyCondition(edge.condition), outcomes[edge.target]))
            for edge in own
        ]
        never = next((edge for edge, v in verdicts if v is Verdict.NEVER), None)
        if never is not None:
            _fail(session, own[0].dependent_is_array, dependent, never, outcomes[never.target], now)
            _drop(session, dependent)
            changed = True
            continue
        left = [edge for edge, v in verdicts if v is Verdict.WAIT]
        for edge, v in verdicts:
            if v is Verdict.HOLDS:
                session.delete(edge)
        if not left:
            release(session, own[0].dependent_is_array, dependent)
            changed = True
        elif len(left) < len(own):
            _show_waiting(session, own[0].dependent_is_array, dependent, left[0])
    return changed


def _still_waiting(session: Session, by_dependent: dict[str, list[JobDependency]]) -> set[str]:
    """The dependents still held for a dependency (not cancelled meanwhile)."""
    jobs = [d for d, own in by_dependent.items() if not own[0].dependent_is_array]
    arrays = [d for d, own in by_dependent.items() if own[0].dependent_is_array]
    held = set(
        session.scalars(
            select(Job.id).where(
                Job.id.in_(jobs),
                Job.state == JobState.PENDING.value,
                Job.gate == JobGate.DEPENDENCY.value,
            )
        )
    )
    for array_id in arrays:
        some = session.scalar(
            select(Job.id)
            .where(
                Job.array_id == array_id,
                Job.gate == JobGate.DEPENDENCY.value,
                Job.state == JobState.PENDING.value,
            )
            .limit(1)
        )
        if some is not None:
            held.add(array_id)
    return held


def _drop(session: Session, dependent: str) -> None:
    session.execute(delete(JobDependency).where(JobDependency.dependent == dependent))


def _held(dependent_is_array: bool, dependent: str) -> Any:
    where = Job.array_id == dependent if dependent_is_array else Job.id == dependent
    return where & (Job.gate == JobGate.DEPENDENCY.value) & (Job.state == JobState.PENDING.value)


def release(session: Session, dependent_is_array: bool, dependent: str) -> None:
    """Every dependency of ``dependent`` holds: a job goes to the scheduler, an array's
    indices to their array's slots (``job_arrays.release_slots``) or, with no parallelism
    limit, to the scheduler."""
    array = session.get(JobArray, dependent) if dependent_is_array else None
    if array is not None and array.parallelism is not None:
        session.execute(
            update(Job)
            .where(_held(True, dependent))
            .values(
                gate=JobGate.ARRAY_SLOT.value,
                reason_code=ReasonCode.WAITING_FOR_ARRAY_SLOT.value,
                reason_message=slot_message(array.id, array.parallelism),
            )
        )
        array.open = True
        return
    session.execute(
        update(Job)
        .where(_held(dependent_is_array, dependent))
        .values(gate=None, reason_code=None, reason_message=None)
    )


def slot_message(array_id: str, parallelism: int) -> str:
    return f"array {array_id} runs at most {parallelism} of its indices at once (parallelism)"


def _show_waiting(
    session: Session, dependent_is_array: bool, dependent: str, edge: JobDependency
) -> None:
    session.execute(
        update(Job)
        .where(_held(dependent_is_array, dependent))
        .values(reason_message=waiting_message(edge))
    )


def _fail(
    session: Session,
    dependent_is_array: bool,
    dependent: str,
    edge: JobDependency,
    outcome: Outcome,
    now: float,
) -> None:
    """A dependency can never hold: the dependent (every held index of an array) fails."""
    condition = DependencyCondition(edge.condition)
    message = (
        f"dependency never satisfied: {_describe(outcome, edge)}, and it was to "
        f"{_PHRASE[condition]}"
    )
    for job in session.scalars(select(Job).where(_held(dependent_is_array, dependent))):
        job.gate = None
        transition(
            session,
            job,
            JobState.FAILED,
            reason=JobEventReason.DEPENDENCY_NEVER_SATISFIED,
            message=message,
            at=now,
            warning=True,
        )
    if dependent_is_array:
        array = session.get(JobArray, dependent)
        if array is not None:
            array.open = False
