"""The audit log in the store: appending records to one hash chain, reading them, verifying it.

Appends are group-committed (as submissions are, ``kiban.services.submissions``): one writer
thread commits as soon as it has a record, taking everything queued meanwhile, so the requests
that arrive during one commit share the next and a burst costs a few commits, not one each.
Every append moves the chain head's row in its transaction (a row lock on PostgreSQL, the write
lock on SQLite, held to the commit), so appends from anywhere, another process included, make
one chain. Where this process knows the head (it moved it last), the records are chained before
the lock is taken and the head is moved on condition that it is still that one: two statements
(move the head, insert the records; one on PostgreSQL, both in one), compiled once; otherwise,
or when another writer moved it, the head is locked and read first (an UPDATE ... RETURNING).
An anchor (``head_anchor``: the last record's number and hash, kept outside the store) lets
``verify`` show records cut off the end even where the head was rewritten to match.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

from prometheus_client import Counter
from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.engine import URL, Connection, Dialect
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from kiban.domain.audit import (
    AuditAction,
    AuditEntry,
    AuditOutcome,
    ChainAnchor,
    ChainedEntry,
    ChainWalk,
    Verification,
    chain,
)
from kiban.services.auth import Principal
from kiban.services.errors import Conflict, Unavailable
from kiban.services.group_commit import GroupCommit
from kiban.store.models_audit import AuditChainHead, AuditRecord

log = logging.getLogger("kiban.audit")

HEAD_ID = 1
_HEAD = cast(Table, AuditChainHead.__table__)
_LOG = cast(Table, AuditRecord.__table__)
VERIFY_PAGE = 5000

# An append's statements, built once: building one (its WHERE clause's comparisons, its cache
# key) cost more CPU than running it, at the batch sizes a busy server's writers commit
_MOVE_KNOWN_HEAD = (
    update(_HEAD)
    .where(
        _HEAD.c.id == HEAD_ID,
        _HEAD.c.seq == bindparam("known_seq"),
        _HEAD.c.hash == bindparam("known_hash"),
    )
    .values(seq=bindparam("new_seq"), hash=bindparam("new_hash"))
)
_LOCK_HEAD = (
    update(_HEAD)
    .where(_HEAD.c.id == HEAD_ID)
    .values(seq=_HEAD.c.seq)
    .returning(_HEAD.c.seq, _HEAD.c.hash)
)
_MOVE_HEAD = (
    update(_HEAD)
    .where(_HEAD.c.id == HEAD_ID)
    .values(seq=bindparam("new_seq"), hash=bindparam("new_hash"))
)
_INSERT_RECORDS = insert(_LOG)
_RECORD_COLUMNS = tuple(column.name for column in _LOG.columns)


@dataclass(frozen=True)
class _DriverSql:
    """A Core statement compiled once for a dialect, run with ``exec_driver_sql``: no compile
    cache lookup, no per-row bind processing (an append's values need none: numbers and text)
    on the two statements every append runs."""

    sql: str
    order: tuple[str, ...] | None  # the bind names in order, for a positional paramstyle
    fixed: dict[str, Any]  # the binds the statement itself gives (the head's id)

    @classmethod
    def of(cls, statement: ClauseElement, dialect: Dialect, keys: Sequence[str] = ()) -> _DriverSql:
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect, column_keys=list(keys)))
        order = tuple(compiled.positiontup or ()) if compiled.positional else None
        # the values the statement holds itself (the head's id), not the binds left to fill
        fixed = {k: v for k, v in compiled.params.items() if type(v) in (int, str)}
        return cls(compiled.string, order, fixed)

    def params(self, values: dict[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        merged = {**self.fixed, **values} if self.fixed else values
        if self.order is None:
            return merged
        return tuple(merged[name] for name in self.order)


_DRIVER_SQL: dict[str, tuple[_DriverSql, _DriverSql]] = {}


def _driver_sql(dialect: Dialect) -> tuple[_DriverSql, _DriverSql]:
    """The conditional move of the head and the records' INSERT, for ``dialect``."""
    key = f"{dialect.name}+{dialect.driver}"
    found = _DRIVER_SQL.get(key)
    if found is None:
        found = (
            _DriverSql.of(_MOVE_KNOWN_HEAD, dialect),
            _DriverSql.of(_INSERT_RECORDS, dialect, _RECORD_COLUMNS),
        )
        _DRIVER_SQL[key] = found
    return found


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
    written in two statements (one on PostgreSQL): the head moved on condition that it is
    still the one known (a row lock on PostgreSQL, the write lock on SQLite, held to the
    commit), then the records. Otherwise (or when the head moved elsewhere) the head is locked
    and read first."""
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
        if connection.dialect.name == "postgresql":
            if _append_after_known_head_pg(connection, known, chained):
                heads.moved(database, last.seq, last.hash)
                return chained
            known = None  # moved elsewhere: lock and read it below
    if known is not None:
        move, insert_records = _driver_sql(connection.dialect)
        moved = connection.exec_driver_sql(
            move.sql,
            move.params(
                {
                    "known_seq": known[0],
                    "known_hash": known[1],
                    "new_seq": last.seq,
                    "new_hash": last.hash,
                }
            ),
        )
        if moved.rowcount == 1:
            connection.exec_driver_sql(
                insert_records.sql, [insert_records.params(_row(c)) for c in chained]
            )
            heads.moved(database, last.seq, last.hash)
            return chained
    # lock and read in one statement: a concurrent append waits here, then reads our head
    head = connection.execute(_LOCK_HEAD).one()
    chained = chain(head.hash, head.seq, entries)
    connection.execute(_INSERT_RECORDS, [_row(c) for c in chained])
    last = chained[-1]
    connection.execute(_MOVE_HEAD, {"new_seq": last.seq, "new_hash": last.hash})
    heads.moved(database, last.seq, last.hash)
    return chained


def _pg_append_sql() -> str:
    """PostgreSQL: the head's conditional move and the records' INSERT as one statement (one
    round trip): the records, passed as one array per column, are inserted only where the
    head moved. A concurrent append holding the head's lock makes it wait, then find the head
    moved (no row), so nothing is inserted and the caller locks and reads the head instead."""
    columns = list(_LOG.columns)
    names = ", ".join(c.name for c in columns)
    arrays = ", ".join(f"%({c.name})s::{c.type.compile()}[]" for c in columns)
    return (
        "WITH moved AS (UPDATE audit_chain_head SET seq = %(new_seq)s, hash = %(new_hash)s "
        f"WHERE id = {HEAD_ID} AND seq = %(known_seq)s AND hash = %(known_hash)s RETURNING id) "
        f"INSERT INTO audit_log ({names}) SELECT * FROM unnest({arrays}) "
        "WHERE EXISTS (SELECT 1 FROM moved)"
    )


_PG_APPEND = _pg_append_sql()


def _append_after_known_head_pg(
    connection: Connection, known: tuple[int, str], chained: list[ChainedEntry]
) -> bool:
    """Append ``chained`` after the head ``known`` in one statement; False (and nothing
    written) when the head is no longer that one."""
    rows = [_row(c) for c in chained]
    params: dict[str, Any] = {name: [row[name] for row in rows] for name in _RECORD_COLUMNS}
    params.update(
        known_seq=known[0], known_hash=known[1], new_seq=chained[-1].seq, new_hash=chained[-1].hash
    )
    inserted = connection.exec_driver_sql(_PG_APPEND, params).rowcount
    return bool(inserted == len(chained))


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
    session: Session,
    principal: Principal,
    writer: AuditWriter | None,
    anchor: ChainAnchor | None = None,
) -> Verification:
    """``verify`` for an admin (Forbidden for anyone else), once ``writer`` is flushed."""
    principal.require_admin()
    _flush(writer)
    return verify(session, anchor)


def chain_anchor(session: Session, principal: Principal, writer: AuditWriter | None) -> ChainAnchor:
    """``head_anchor`` for an admin (Forbidden for anyone else), once ``writer`` is flushed:
    every request answered before this one is under the anchor."""
    principal.require_admin()
    _flush(writer)
    return head_anchor(session)


def head_anchor(session: Session) -> ChainAnchor:
    """The chain's last record as an anchor to keep outside the store (seq 0 and the genesis
    hash for an empty log). The head and the record it names are read in one statement (one
    snapshot, while appends go on); Conflict when they disagree: the log is broken already,
    and ``verify`` says where."""
    row = session.execute(
        select(_HEAD.c.seq, _HEAD.c.hash, _LOG.c.hash.label("record_hash"))
        .select_from(_HEAD.outerjoin(_LOG, _LOG.c.seq == _HEAD.c.seq))
        .where(_HEAD.c.id == HEAD_ID)
    ).one()
    if row.seq > 0 and row.record_hash != row.hash:
        raise Conflict(
            f"the chain head names record {row.seq}, which the log does not hold as named: "
            "verify the log (kiban audit verify) before anchoring it"
        )
    return ChainAnchor(row.seq, row.hash)


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


def verify(session: Session, anchor: ChainAnchor | None = None) -> Verification:
    """Walk the whole chain in order; the first record where it breaks, if any (with an
    ``anchor``: also where the walk does not reach the anchored record with its hash)."""
    walk = ChainWalk(anchor)
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
