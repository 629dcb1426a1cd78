"""The audit log in the store: appending records to one hash chain, reading them, verifying it.

Appends are group-committed (as submissions are, ``kiban.services.submissions``): one writer
thread commits as soon as it has a record, taking everything queued meanwhile, so the requests
that arrive during one commit share the next and a burst costs a few commits, not one each.
Each transaction first locks the chain head's row and reads it in one statement (an
UPDATE ... RETURNING: a row lock on PostgreSQL, the write lock on SQLite), so appends from
anywhere, another process included, make one chain.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from prometheus_client import Counter
from sqlalchemy import insert, select, update
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
from kiban.store.models import AuditChainHead, AuditRecord

log = logging.getLogger("kiban.audit")

HEAD_ID = 1
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


def append(session: Session, entries: Sequence[AuditEntry]) -> list[ChainedEntry]:
    """Append ``entries`` to the chain in ``session``'s transaction (the caller commits); the
    chain head stays locked until then."""
    # lock and read in one statement: a concurrent append waits here, then reads our head
    head = session.execute(
        update(AuditChainHead)
        .where(AuditChainHead.id == HEAD_ID)
        .values(seq=AuditChainHead.seq)
        .returning(AuditChainHead.seq, AuditChainHead.hash)
    ).one()
    chained = chain(head.hash, head.seq, entries)
    if not chained:
        return chained
    session.execute(insert(AuditRecord), [_row(c) for c in chained])
    last = chained[-1]
    session.execute(
        update(AuditChainHead)
        .where(AuditChainHead.id == HEAD_ID)
        .values(seq=last.seq, hash=last.hash)
    )
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
