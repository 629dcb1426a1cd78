"""Group commit for submissions: many accepted jobs are written in one transaction.

A submission's cost is dominated by its commit (and, on SQLite, by waiting for the write
lock). One writer thread (``kiban.services.group_commit``) takes whatever submissions have
queued up since its last commit and writes them together, so a burst of N submissions costs
about one commit, not N. Each caller gets its answer only after its job is durably stored, and
after ``on_stored`` was told of it (the control loop, which asks for a pass only if a new job
may enter a queue's window).

Every new job is stored here: the API's submissions and the service controller's replicas
alike (a replica's own row is written in the same transaction as its job, by ``along``). A
submission's audit record joins its job's transaction too (``audited``): the answer then needs
one commit, not two in a row.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Insert, Table, insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.audit import AuditEntry
from kiban.services import audit
from kiban.services.group_commit import GroupCommit
from kiban.services.jobs import ID_RENEWALS, renew_job_id
from kiban.store.models import Event, Job

log = logging.getLogger("kiban.submissions")
JOBS: Table = Job.__table__  # type: ignore[assignment]
EVENTS: Table = Event.__table__  # type: ignore[assignment]
INSERTS: dict[Table, Insert] = {JOBS: insert(JOBS), EVENTS: insert(EVENTS)}
"""Made once: each batch reuses the statement (and its compiled form), not a new one."""


def _values(row: Job | Event) -> dict[str, Any]:
    """The column values set on a new ORM object (not the ones the database will fill in):
    its attributes but SQLAlchemy's state, the only private one (copied at C speed, not
    filtered key by key: this was a tenth of the writer's Python time per submission)."""
    values = vars(row).copy()
    del values["_sa_instance_state"]
    return values


def _insert_rows(session: Session, table: Table, rows: Iterable[Job | Event]) -> None:
    """INSERT the rows' values into ``table``, in order: one executemany per run of rows that
    set the same columns (as the ORM's bulk INSERT groups them), through SQLAlchemy Core.

    Core rather than the ORM's bulk INSERT of the same values: their attributes are the
    table's columns one for one, and the ORM's layer per row (checking and sorting each
    value by attribute) was about half of the writer's time per submission."""
    connection = session.connection()  # Core on the session's transaction: no ORM layer
    for _, run in itertools.groupby(map(_values, rows), key=lambda values: values.keys()):
        connection.execute(INSERTS[table], list(run))


@dataclass
class _Pending:
    job: Job
    events: tuple[Event, ...]
    along: Callable[[Session, Job], None] | None = None
    audited: Callable[[str], AuditEntry] | None = None
    done: Future[None] = field(default_factory=Future)
    waiter: asyncio.Future[None] | None = None  # ``stored``'s, on its event loop
    renewals: int = 0

    def renew_id(self) -> None:
        """Take a fresh id (the random one is another job's), in the job's events too."""
        renew_job_id(self.job, self.events)
        self.renewals += 1


class SubmissionWriter:
    """Writes submissions in batches of up to ``max_batch`` from one thread
    (``kiban.services.group_commit``)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        max_batch: int = 256,
        on_stored: Callable[[Sequence[Job]], None] | None = None,
    ) -> None:
        self._sessions = sessions
        self._on_stored = on_stored
        self._group = GroupCommit(self._commit, max_batch, name="kiban-submissions")

    def write(
        self,
        job: Job,
        *events: Event,
        along: Callable[[Session, Job], None] | None = None,
        audited: Callable[[str], AuditEntry] | None = None,
    ) -> Future[None]:
        """Queue a job and its events; the future completes once all are committed.

        ``along`` adds rows that belong with the job (a service's replica) in the same
        transaction, once the job is written under its final id; ``audited`` gives the audit
        record of its submission, given that id, appended to the chain in that transaction."""
        pending = _Pending(job, events, along, audited)
        self._group.put(pending)
        return pending.done

    async def stored(
        self,
        job: Job,
        *events: Event,
        along: Callable[[Session, Job], None] | None = None,
        audited: Callable[[str], AuditEntry] | None = None,
    ) -> None:
        """``write``, awaited on the event loop: returns once the job is committed.

        The writer completes a batch's waiters of one event loop in one call to it (one
        wake-up of the loop per batch, not one per submission through ``write``'s future)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._group.put(_Pending(job, events, along, audited, waiter=waiter))
        await waiter

    def stop(self) -> None:
        """Write what is queued, then stop the thread."""
        self._group.stop()

    def _commit(self, batch: list[_Pending]) -> None:
        try:
            with self._sessions() as session:
                # Bulk INSERTs of the rows' values: no unit of work, no RETURNING of event ids.
                _insert_rows(session, JOBS, (p.job for p in batch))
                _insert_rows(session, EVENTS, (e for p in batch for e in p.events))
                for pending in batch:
                    if pending.along is not None:
                        pending.along(session, pending.job)
                records = [p.audited(p.job.id) for p in batch if p.audited is not None]
                if records:
                    audit.append(session, records)
                session.commit()
        except Exception as exc:
            if len(batch) > 1:
                # One bad row must not fail the others: write them one by one.
                for pending in batch:
                    self._commit([pending])
                return
            pending = batch[0]
            if (
                isinstance(exc, IntegrityError)
                and pending.renewals < ID_RENEWALS
                and self._id_taken(pending.job.id)
            ):
                # ids end in 6 random characters: among thousands of jobs of one name, two
                # meet now and then (about 5% of runs of 15,000 in one store)
                log.info("job id %s is taken; the submission takes another", pending.job.id)
                pending.renew_id()
                self._commit(batch)
                return
            log.exception("could not store submission %s", pending.job.id)
            _complete(batch, RuntimeError("the job could not be stored"))
            return
        if self._on_stored is not None:
            try:
                self._on_stored([pending.job for pending in batch])
            except Exception:  # the jobs are stored: the next pass (a resync at least) sees them
                log.exception("could not tell of %d stored submissions", len(batch))
        _complete(batch)

    def _id_taken(self, job_id: str) -> bool:
        with self._sessions() as session:
            return session.get(Job, job_id) is not None


def _complete(batch: list[_Pending], error: BaseException | None = None) -> None:
    """Complete the batch's futures: ``write``'s each, ``stored``'s waiters in one call to
    each of their event loops (from the writer's thread)."""
    waiters: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for pending in batch:
        if error is None:
            pending.done.set_result(None)
        else:
            pending.done.set_exception(error)
        if pending.waiter is not None:
            waiters.setdefault(pending.waiter.get_loop(), []).append(pending.waiter)
    for loop, futures in waiters.items():
        try:
            loop.call_soon_threadsafe(_settle, futures, error)
        except RuntimeError:  # its loop is closed: nobody waits for the answer any more
            log.info("%d submissions were stored after their event loop closed", len(futures))


def _settle(futures: list[asyncio.Future[None]], error: BaseException | None) -> None:
    """On the waiters' event loop: complete those still waited for (a request gone away
    cancels its own)."""
    for future in futures:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
