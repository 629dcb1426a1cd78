"""The audit log in the store: appending records to one hash chain, reading them, verifying it.

Appends are group-committed (as submissions are, ``kiban.services.submissions``): one writer
thread commits as soon as it has a record, taking everything queued meanwhile, so the requests
that arrive during one commit share the next and a burst costs a few commits, not one each.
Every append moves the chain head's row in its transaction (a row lock on PostgreSQL, the write
lock on SQLite, held to the commit), so appends from anywhere, another process included, make
one chain. Where this process knows the head (it moved it last), the records are chained before
the lock is taken and the head is moved on condition that it is still that one: two statements
(move the head, insert the records); otherwise, or when another writer moved it, the head is
locked and read first (an UPDATE ... RETURNING), as a third.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import cast

from prometheus_client import Counter
from sqlalchemy import Table, insert, select, update
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.audit import (
    AuditAction,
    AuditEntry,
    AuditOutcome,
    ChainedEntry,
    ChainWalk,
    Verification,
    chain,
)
from kiban.services.auth import Principal
from kiban.services.errors import Unavailable
from kiban.services.group_commit import GroupCommit
from kiban.store.models_audit import AuditChainHead, AuditRecord

log = logging.getLogger("kiban.audit")

HEAD_ID = 1
_HEAD = cast(Table, AuditChainHead.__table__)
_LOG = cast(Table, AuditRecord.__table__)
VERIFY_PAGE = 5000

APPEND_FAILURES_METRIC = "kiban_audit_append_failures"
"""Records the store refused (their requests were carried out and answered all the same)."""


def append_failures_counter() -> Counter:
    """A new counter of refused appends, in no registry: the control plane's ``/metrics``
    yields the writer's own (so each writer, a test's too, counts only its records)."""
    return Counter(
        APPEND_FAILURES_METRIC,
        "Audit records the store refused to append; their requests were answered regardless.",
        registry=None,
    )


class ChainHeads:
    """The chain head as this process last moved it, per database (its URL): an append
    then guesses where the chain ends without reading it under the lock first.

    A guess is only ever a guess: the append moves the head on condition that it is still the
    one guessed (its number and hash), and when another writer moved it meanwhile (another
    process, or a transaction of this one that was rolled back) it reads the head under the
    lock and appends there, as without a guess. So a stale guess costs a statement, never a
    broken chain."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heads: dict[URL, tuple[int, str]] = {}

    def get(self, database: URL) -> tuple[int, str] | None:
        with self._lock:
            return self._heads.get(database)

    def moved(self, database: URL, seq: int, hash_: str) -> None:
        with self._lock:
            self._heads[database] = (seq, hash_)


HEADS = ChainHeads()
"""This process's guesses (the audit writer and the submission writer share them)."""


def append(
    session: Session, entries: Sequence[AuditEntry], heads: ChainHeads = HEADS
) -> list[ChainedEntry]:
    """Append ``entries`` to the chain in ``session``'s transaction (the caller commits); the
    chain head stays locked until then.

    Where ``heads`` knows the head, the records are chained to it before any lock is taken and
    written in two statements: the head moved on condition that it is still the one known (a
    row lock on PostgreSQL, the write lock on SQLite, held to the commit), then the records.
    Otherwise (or when the head moved elsewhere) the head is locked and read first."""
    if not entries:
        return []
    # Core statements on the tables, on the session's connection: the ORM's bulk machinery
    # (identity map, evaluation of the criteria) has nothing to do for these rows
    connection = session.connection()
    database = connection.engine.url
    known = heads.get(database)
    if known is not None:
        chained = chain(known[1], known[0], entries)
        last = chained[-1]
        moved = connection.execute(
            update(_HEAD)
            .where(_HEAD.c.id == HEAD_ID, _HEAD.c.seq == known[0], _HEAD.c.hash == known[1])
            .values(seq=last.seq, hash=last.hash)
        )
        if moved.rowcount == 1:
            connection.execute(insert(_LOG), [_row(c) for c in chained])
            heads.moved(database, last.seq, last.hash)
            return chained
    # lock and read in one statement: a concurrent append waits here, then reads our head
    head = connection.execute(
        update(_HEAD)
        .where(_HEAD.c.id == HEAD_ID)
        .values(seq=_HEAD.c.seq)
        .returning(_HEAD.c.seq, _HEAD.c.hash)
    ).one()
    chained = chain(head.hash, head.seq, entries)
    connection.execute(insert(_LOG), [_row(c) for c in chained])
    last = chained[-1]
    connection.execute(
        update(_HEAD).where(_HEAD.c.id == HEAD_ID).values(seq=last.seq, hash=last.hash)
    )
    heads.moved(database, last.seq, last.hash)
    return chained


def _row(chained: ChainedEntry) -> dict[str, object]:
    entry = chained.entry
    return {
        "seq": chained.seq,
        "at": entry.at,
        "member": entry.member,
        "role": entry.role,
        "tenant": entry.tenant,
        "source": entry.source,
        "method": entry.method,
        "path": entry.path,
        "action": str(entry.action),
        "target": entry.target,
        "status": entry.status,
        "outcome": str(entry.outcome),
        "prev_hash": chained.prev_hash,
        "hash": chained.hash,
    }


def _chained(row: AuditRecord) -> ChainedEntry:
    entry = AuditEntry(
        at=row.at,
        member=row.member,
        role=row.role,
        tenant=row.tenant,
        source=row.source,
        method=row.method,
        path=row.path,
        action=_action(row.action),
        target=row.target,
        status=row.status,
        outcome=_outcome(row.outcome),
    )
    return ChainedEntry(row.seq, entry, row.prev_hash, row.hash)


def _action(value: str) -> AuditAction:
    try:
        return AuditAction(value)
    except ValueError:  # a name no longer known (or an edited one): kept as read, for the hash
        return value  # type: ignore[return-value]


def _outcome(value: str) -> AuditOutcome:
    try:
        return AuditOutcome(value)
    except ValueError:
        return value  # type: ignore[return-value]


@dataclass(frozen=True)
class AuditQuery:
    """Which records to list: since a time, of a member, of an action; newest first."""

    since: float | None = None
    member: str | None = None
    action: AuditAction | None = None
    limit: int = 100


def records(session: Session, query: AuditQuery) -> list[ChainedEntry]:
    """The records ``query`` asks for, newest first."""
    statement = select(AuditRecord).order_by(AuditRecord.seq.desc()).limit(query.limit)
    if query.since is not None:
        statement = statement.where(AuditRecord.at >= query.since)
    if query.member is not None:
        statement = statement.where(AuditRecord.member == query.member)
    if query.action is not None:
        statement = statement.where(AuditRecord.action == str(query.action))
    return [_chained(row) for row in session.scalars(statement)]


def list_records(
    session: Session, principal: Principal, query: AuditQuery, writer: AuditWriter | None
) -> list[ChainedEntry]:
    """``records`` for an admin (Forbidden for anyone else: the log names every tenant), once
    ``writer`` has stored what was queued: every request answered before this one is listed."""
    principal.require_admin()
    _flush(writer)
    return records(session, query)


def verify_chain(
    session: Session, principal: Principal, writer: AuditWriter | None
) -> Verification:
    """``verify`` for an admin (Forbidden for anyone else), once ``writer`` is flushed."""
    principal.require_admin()
    _flush(writer)
    return verify(session)


def _flush(writer: AuditWriter | None) -> None:
    if writer is not None and not writer.flush():
        raise Unavailable("the audit log is still being written; try again", retry_after_s=1)


def _pages(session: Session) -> Iterator[list[ChainedEntry]]:
    after = 0
    while True:
        rows = session.scalars(
            select(AuditRecord)
            .where(AuditRecord.seq > after)
            .order_by(AuditRecord.seq)
            .limit(VERIFY_PAGE)
        ).all()
        if not rows:
            return
        yield [_chained(row) for row in rows]
        after = rows[-1].seq


def verify(session: Session) -> Verification:
    """Walk the whole chain in order; the first record where it breaks, if any."""
    walk = ChainWalk()
    for page in _pages(session):
        if not walk.feed(page):
            break
    head = session.execute(
        select(AuditChainHead.seq, AuditChainHead.hash).where(AuditChainHead.id == HEAD_ID)
    ).one()
    return walk.finish(head.seq, head.hash)


@dataclass
class _Pending:
    entry: AuditEntry
    done: Future[int] = field(default_factory=Future)


class AuditWriter:
    """Appends audit entries in batches of up to ``max_batch`` from one thread
    (``kiban.services.group_commit``); each caller's future completes with its record's number
    once it is committed.

    There is no linger: the thread commits as soon as it has something, taking what queued up
    while the previous commit ran, so under load a batch is everything of one commit's time.
    The API holds each audited answer until its record's future is done
    (``kiban.api.audit_trail``), so a kill -9 loses no record of an answered request.
    ``flush`` waits for what is queued; ``stop`` writes what is queued. A batch the store
    refuses fails every future of it and is counted in ``failures``.
    """

    def __init__(self, sessions: sessionmaker[Session], max_batch: int = 512) -> None:
        self._sessions = sessions
        self._group = GroupCommit(self._commit, max_batch, name="kiban-audit")
        self.failures = append_failures_counter()
        """Records the store refused (``kiban_audit_append_failures_total``)."""

    def record(self, entry: AuditEntry) -> Future[int]:
        """Queue ``entry``; the future completes once it is in the store."""
        pending = _Pending(entry)
        self._group.put(pending)
        return pending.done

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until what was queued before this call is committed (False: not in time)."""
        return self._group.flush(timeout_s)

    def stop(self) -> None:
        """Write what is queued, then stop the thread."""
        self._group.stop()

    def _commit(self, batch: list[_Pending]) -> None:
        try:
            with self._sessions() as session:
                chained = append(session, [p.entry for p in batch])
                session.commit()
        except Exception as exc:
            log.exception("could not append %d audit record(s)", len(batch))
            self.failures.inc(len(batch))
            for pending in batch:
                pending.done.set_exception(exc)
            return
        for pending, record in zip(batch, chained, strict=True):
            pending.done.set_result(record.seq)
