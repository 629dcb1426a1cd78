"""Job arrays (``spec.array``, ``kiban run --array 0-99%8``): one job per index, stored together.

An array's id is a job id (``train-x7k2p9``); its index ``i`` is the job ``<id>-<i>``
(``train-x7k2p9-7``; Slurm writes ``1234_7``, but ids here are DNS labels), an ordinary job
under its queue's quota and fair share, whose replicas get ``KIBAN_ARRAY_JOB_ID`` and
``KIBAN_ARRAY_INDEX`` (``launch_env``). All indices are written in one
transaction (bulk inserts): 10,000 of them are accepted at once, or none on error. With a
``parallelism``, the indices beyond it are held (``JobGate.ARRAY_SLOT``) and let through as
the earlier ones end (``release_slots``, each scheduling pass, for open arrays only).

The queue orders jobs by priority, submit time, then id, and ids compare as strings
(``-10`` before ``-2``): so index ``n`` of the list is stamped ``n`` microseconds after the
array (``INDEX_STAGGER``; 10 ms for 10,000 indices), and the indices queue in numeric order,
read in that order by the pending jobs' index too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kiban.domain.job_relations import JobGate, Relations, array_index_id, parse_indices
from kiban.domain.jobspec import JobSpec
from kiban.domain.states import JobState
from kiban.scheduler.reasons import ReasonCode
from kiban.services import dependencies
from kiban.services.auth import Principal
from kiban.services.dependencies import slot_message, waiting_message
from kiban.services.errors import Conflict, NotFound, invalid
from kiban.services.jobs import ID_RENEWALS, Prepared, is_job_id, new_job_id, stop_unended
from kiban.store.models import Event, Job, JobArray, JobDependency

INDEX_STAGGER = 1e-6
"""Seconds between the submit times of consecutive indices (their order in the queue)."""

_ACTIVE = (
    JobState.PENDING.value,
    JobState.ADMITTED.value,
    JobState.RUNNING.value,
    JobState.STOPPING.value,
)


def array_relations(
    spec: JobSpec, source_path: Callable[[str], str], limit: int
) -> tuple[tuple[int, ...], int | None]:
    """The indices of ``spec.array`` under the server's ``limit``, and its parallelism
    (InvalidInput naming the field when there are more than ``limit``)."""
    if spec.array is None:
        return (), None
    try:
        indices = parse_indices(spec.array.indices, limit)
    except ValueError as exc:
        raise invalid(source_path("spec.array.indices"), str(exc)) from None
    return tuple(indices), spec.array.parallelism


@dataclass(frozen=True)
class StoredArray:
    """An array as its submission stored it (the answer to the submitter)."""

    array: JobArray
    warnings: tuple[str, ...] = ()


def _values(row: Job | Event) -> dict[str, Any]:
    return {key: value for key, value in vars(row).items() if not key.startswith("_")}


def store_array(
    sessions: Callable[[], AbstractContextManager[Session]], prepared: Prepared
) -> StoredArray:
    """Write an array's row, one job and one event per index, and its dependencies, in one
    transaction (bulk inserts). Its id is the prepared job's, or a fresh one when that is
    taken (by a job or another array)."""
    relations = prepared.relations
    assert relations is not None and relations.indices
    for _ in range(ID_RENEWALS + 1):
        array_id = prepared.job.id
        with sessions() as session:
            if session.get(Job, array_id) is None and session.get(JobArray, array_id) is None:
                try:
                    array = _write(session, prepared, relations, array_id)
                    session.commit()
                    return StoredArray(array, prepared.warnings)
                except IntegrityError:
                    session.rollback()
        prepared.job.id = new_job_id(prepared.job.name)
    raise Conflict("no free id for the array; submit it again")


def _write(session: Session, prepared: Prepared, relations: Relations, array_id: str) -> JobArray:
    job = prepared.job
    parallelism = relations.parallelism
    array = JobArray(
        id=array_id,
        name=job.name,
        tenant=job.tenant,
        queue=job.queue,
        indices=",".join(_ranges(relations.indices)),
        size=len(relations.indices),
        parallelism=parallelism,
        submitted_at=job.submitted_at,
        submitted_by=job.submitted_by,
        open=False,
    )
    session.add(array)
    session.flush()
    base = _values(job)
    first_wait = waiting_message(relations.targets[0]) if relations.targets else None
    rows = []
    made = []
    submitted = next(e for e in prepared.events if e.reason == "Submitted")
    for n, index in enumerate(relations.indices):
        gate, code, message = None, None, None
        if first_wait is not None:
            gate, code, message = (
                JobGate.DEPENDENCY.value,
                ReasonCode.WAITING_FOR_DEPENDENCY.value,
                first_wait,
            )
        elif parallelism is not None and n >= parallelism:
            gate, code, message = (
                JobGate.ARRAY_SLOT.value,
                ReasonCode.WAITING_FOR_ARRAY_SLOT.value,
                slot_message(array_id, parallelism),
            )
            array.open = True
        job_id = array_index_id(array_id, index)
        rows.append(
            base
            | {
                "id": job_id,
                "submitted_at": job.submitted_at + n * INDEX_STAGGER,
                "array_id": array_id,
                "array_index": index,
                "gate": gate,
                "reason_code": code,
                "reason_message": message,
            }
        )
        made.append(
            _values(submitted)
            | {
                "object_name": job_id,
                "message": f"index {index} of array {array_id}: " + submitted.message,
            }
        )
    session.execute(insert(Job), rows)
    session.execute(insert(Event), made)
    if relations.targets:
        session.execute(
            insert(JobDependency),
            dependencies.dependency_rows(array_id, True, relations.targets),
        )
    return array


def launch_env(job: Job) -> dict[str, str]:
    """What an array's index adds to its replicas' environment (nothing for other jobs)."""
    if job.array_id is None:
        return {}
    return {"KIBAN_ARRAY_JOB_ID": job.array_id, "KIBAN_ARRAY_INDEX": str(job.array_index)}


def hold_for_dependencies(prepared: Prepared) -> Callable[[Session, Job], None] | None:
    """For a single job with dependencies: hold it (its gate and reason), and the ``along``
    of its write that stores its dependencies in the same transaction (None without any)."""
    relations = prepared.relations
    if relations is None or not relations.targets:
        return None
    targets = relations.targets
    job = prepared.job
    job.gate = JobGate.DEPENDENCY.value
    job.reason_code = ReasonCode.WAITING_FOR_DEPENDENCY.value
    job.reason_message = waiting_message(targets[0])

    def along(session: Session, stored: Job) -> None:
        session.execute(
            insert(JobDependency), dependencies.dependency_rows(stored.id, False, targets)
        )

    return along


def _ranges(indices: Iterable[int]) -> list[str]:
    """``[0, 1, 2, 5, 7, 8]`` as ``["0-2", "5", "7-8"]``."""
    out: list[str] = []
    start = last = None
    for i in indices:
        if last is not None and i == last + 1:
            last = i
            continue
        if start is not None:
            out.append(f"{start}" if start == last else f"{start}-{last}")
        start = last = i
    if start is not None:
        out.append(f"{start}" if start == last else f"{start}-{last}")
    return out


def release_slots(session: Session) -> bool:
    """Let the held indices of each open array through, in index order, up to its
    parallelism less those already through and not ended. True if any was let through.

    An index through its slot and then held by a budget (``JobGate.BUDGET``) keeps its slot:
    otherwise each pass would let as many more through to be held in turn, and the budget's
    release would start them all at once, past the parallelism (Slurm's ``%N`` likewise caps
    the tasks that run; those waiting on a limit start no siblings)."""
    released = False
    through = or_(Job.gate.is_(None), Job.gate == JobGate.BUDGET.value)
    for array in session.scalars(select(JobArray).where(JobArray.open.is_(True))):
        limit = array.parallelism or 0
        active = session.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.array_id == array.id, through, Job.state.in_(_ACTIVE))
        )
        room = limit - int(active or 0)
        if room <= 0:
            continue
        ids = list(
            session.scalars(
                select(Job.id)
                .where(
                    Job.array_id == array.id,
                    Job.gate == JobGate.ARRAY_SLOT.value,
                    Job.state == JobState.PENDING.value,  # not one cancelled while held
                )
                .order_by(Job.array_index)
                .limit(room)
            )
        )
        if len(ids) < room:
            array.open = False
        if ids:
            session.execute(
                update(Job)
                .where(Job.id.in_(ids), Job.state == JobState.PENDING.value)
                .values(gate=None, reason_code=None, reason_message=None)
            )
            released = True
    return released


# -- reading -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArrayStatus:
    """An array and its indices' standing: counts by state, and which indices are in each."""

    array: JobArray
    counts: dict[str, int]
    held: dict[str, int] = field(default_factory=dict)  # held indices by JobGate
    by_state: dict[str, str] | None = None  # state: the indices in it, as ranges
    waiting_for: list[dict[str, str]] = field(default_factory=list)  # unresolved dependencies

    @property
    def done(self) -> bool:
        return all(JobState(s).terminal for s, n in self.counts.items() if n)

    @property
    def succeeded(self) -> bool:
        return self.done and self.counts.get(JobState.SUCCEEDED.value, 0) == self.array.size


def get_visible(session: Session, principal: Principal, array_id: str) -> JobArray:
    """The array if the caller may see it; NotFound otherwise (as for jobs)."""
    array = session.get(JobArray, array_id) if is_job_id(array_id) else None
    if array is None or not principal.can_see(array.tenant):
        raise NotFound(f"array {array_id} not found")
    return array


def counts_of(session: Session, array_ids: list[str]) -> dict[str, dict[str, int]]:
    """Each array's indices counted by state (through the index on array and state)."""
    counts: dict[str, dict[str, int]] = {a: {} for a in array_ids}
    if not array_ids:
        return counts
    query = (
        select(Job.array_id, Job.state, func.count())
        .where(Job.array_id.in_(array_ids))
        .group_by(Job.array_id, Job.state)
    )
    for array_id, state, count in session.execute(query):
        counts[str(array_id)][state] = int(count)
    return counts


def status(session: Session, array: JobArray, with_indices: bool = False) -> ArrayStatus:
    """``array``'s counts by state and held indices; with ``with_indices``, which index is in
    which state (ranges)."""
    counts = counts_of(session, [array.id])[array.id]
    held = {
        str(gate): int(n)
        for gate, n in session.execute(
            select(Job.gate, func.count())
            .where(
                Job.array_id == array.id,
                Job.gate.is_not(None),
                Job.state == JobState.PENDING.value,
            )
            .group_by(Job.gate)
        )
    }
    by_state = None
    if with_indices:
        per_state: dict[str, list[int]] = {}
        for index, state in session.execute(
            select(Job.array_index, Job.state)
            .where(Job.array_id == array.id)
            .order_by(Job.array_index)
        ):
            per_state.setdefault(state, []).append(index or 0)
        by_state = {state: ",".join(_ranges(ids)) for state, ids in per_state.items()}
    edges = session.scalars(
        select(JobDependency)
        .where(JobDependency.dependent == array.id)
        .order_by(JobDependency.position)
    )
    waiting = [{"job": e.target, "condition": e.condition} for e in edges]
    return ArrayStatus(array, counts, held, by_state, waiting)


def list_visible(
    session: Session, principal: Principal, limit: int = 100
) -> list[tuple[JobArray, dict[str, int]]]:
    """The arrays the caller may see, newest first, with their counts by state."""
    query = select(JobArray).order_by(JobArray.submitted_at.desc(), JobArray.id).limit(limit)
    if not principal.is_admin:
        query = query.where(JobArray.tenant == principal.tenant)
    arrays = list(session.scalars(query))
    counts = counts_of(session, [a.id for a in arrays])
    return [(a, counts[a.id]) for a in arrays]


# -- cancelling --------------------------------------------------------------------------------
def cancel(session: Session, principal: Principal, array_id: str, at: float) -> ArrayStatus:
    """End every index of the array not ended yet: pending ones at once, running ones after
    their grace period (as ``jobs.cancel`` for each). Conflict if all have ended already."""
    array = get_visible(session, principal, array_id)
    principal.require_own(array.submitted_by, f"cancelling array {array.id}")
    unended = list(
        session.scalars(
            select(Job)
            .where(Job.array_id == array.id, Job.state.in_(_ACTIVE))
            .order_by(Job.array_index)
            .with_for_update()
        )
    )
    if not unended:
        raise Conflict(f"array {array.id}: every index has ended already")
    for job in unended:
        stop_unended(session, job, f"array {array.id} cancelled by {principal.name}", at)
    array.open = False
    session.flush()
    return status(session, array)
