"""The audit writer's group commit: records queued while a commit runs share the next one, a
commit the store refuses fails every record of its batch (and counts them), and the writer goes
on with the next batch. And the append itself: to the head this process moved last in two
statements, after another writer's records when its guess no longer holds."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import replace

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.audit import AuditAction, AuditEntry, AuditOutcome
from kiban.platform import Platform
from kiban.services import audit
from kiban.store.db import make_engine, migrate, session_factory


def entry(n: int) -> AuditEntry:
    return AuditEntry(
        at=float(n),
        member="admin",
        role="admin",
        tenant=None,
        source="127.0.0.1",
        method="POST",
        path=f"/api/v1/jobs/j{n}/cancel",
        action=AuditAction.JOBS_CANCEL,
        target=f"j{n}",
        status=404,
        outcome=AuditOutcome.REFUSED,
    )


class GatedSessions:
    """The store's sessions, one per commit, counted; the first waits for ``opened`` (so that
    records queue up behind it), and the transactions numbered in ``refuse`` fail."""

    def __init__(self, sessions: sessionmaker[Session], refuse: frozenset[int] = frozenset()):
        self.sessions = sessions
        self.refuse = refuse
        self.opened = threading.Event()
        self.commits = 0
        self.first_started = threading.Event()

    def __call__(self) -> Session:
        self.commits += 1
        if self.commits == 1:
            self.first_started.set()
            assert self.opened.wait(30), "the gate was never opened"
        if self.commits in self.refuse:
            raise RuntimeError(f"the store refused transaction {self.commits}")
        return self.sessions()


def writer_of(gated: GatedSessions, max_batch: int = 512) -> audit.AuditWriter:
    return audit.AuditWriter(gated, max_batch=max_batch)  # type: ignore[arg-type]


def failures(writer: audit.AuditWriter) -> float:
    """``kiban_audit_append_failures_total`` as the writer's counter reports it."""
    (metric,) = writer.failures.collect()
    return next(s.value for s in metric.samples if s.name.endswith("_total"))


@pytest.mark.parametrize(("records", "max_batch", "commits"), [(50, 512, 2), (50, 10, 6)])
def test_records_queued_during_a_commit_share_the_next(
    platform: Platform, records: int, max_batch: int, commits: int
) -> None:
    """The first record is committed at once, alone (no linger); the others, queued while it
    was, go in as few commits as ``max_batch`` allows."""
    gated = GatedSessions(platform.sessions)
    writer = writer_of(gated, max_batch)
    try:
        first = writer.record(entry(0))
        assert gated.first_started.wait(30)
        rest = [writer.record(entry(n)) for n in range(1, records)]
        gated.opened.set()
        seqs = [f.result(timeout=30) for f in [first, *rest]]
        assert seqs == sorted(seqs) and len(set(seqs)) == records  # one chain, in queue order
        assert gated.commits == commits
        with platform.sessions() as session:
            assert audit.verify(session).intact
    finally:
        writer.stop()


def test_a_refused_commit_fails_every_record_of_its_batch(platform: Platform) -> None:
    gated = GatedSessions(platform.sessions, refuse=frozenset({2}))
    writer = writer_of(gated)
    try:
        first = writer.record(entry(0))
        assert gated.first_started.wait(30)
        refused = [writer.record(entry(n)) for n in range(1, 8)]
        gated.opened.set()
        assert first.result(timeout=30) >= 1
        for future in refused:
            with pytest.raises(RuntimeError, match="refused transaction 2"):
                future.result(timeout=30)
        assert failures(writer) == 7
        after: Future[int] = writer.record(entry(8))  # the writer goes on
        assert after.result(timeout=30) == first.result() + 1
        assert failures(writer) == 7
    finally:
        writer.stop()


def test_flush_waits_for_what_was_queued(platform: Platform) -> None:
    gated = GatedSessions(platform.sessions)
    writer = writer_of(gated)
    try:
        futures = [writer.record(entry(n)) for n in range(5)]
        assert gated.first_started.wait(30)
        gated.opened.set()
        assert writer.flush(timeout_s=30)
        assert all(f.done() for f in futures)
    finally:
        writer.stop()


@pytest.fixture
def store(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url)
    migrate(engine)
    yield engine
    engine.dispose()


def appended(engine: Engine, heads: audit.ChainHeads, *ns: int, commit: bool = True) -> list[int]:
    """Append ``entry(n)`` for each of ``ns`` in one transaction, guessing with ``heads``."""
    with session_factory(engine)() as session:
        seqs = [c.seq for c in audit.append(session, [entry(n) for n in ns], heads)]
        if commit:
            session.commit()
        else:
            session.rollback()
    return seqs


def statements(engine: Engine) -> list[str]:
    """The SQL statements ``engine`` runs from now on (first words), as they run."""
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _seen(_conn: object, _cursor: object, sql: str, *_rest: object) -> None:
        seen.append(" ".join(sql.split()[:3]))

    return seen


def test_an_append_to_the_head_this_process_moved_last_takes_two_statements(
    store: Engine,
) -> None:
    """Two on SQLite (move the head, insert the records), one on PostgreSQL (both in one)."""
    heads = audit.ChainHeads()
    assert appended(store, heads, 0) == [1]  # the head unknown: locked and read first
    seen = statements(store)
    assert appended(store, heads, 1, 2) == [2, 3]
    expected = (
        ["WITH moved AS"]
        if store.dialect.name == "postgresql"
        else ["UPDATE audit_chain_head SET", "INSERT INTO audit_log"]
    )
    assert [s for s in seen if not s.startswith("select")] == expected
    odd = replace(  # every field stored as given: None where it may be, a float's every digit
        entry(3),
        at=1_700_000_000.123456,
        member=None,
        role=None,
        source=None,
        status=None,
        outcome=AuditOutcome.ABANDONED,
    )
    with session_factory(store)() as session:
        assert [c.seq for c in audit.append(session, [odd, entry(4)], heads)] == [4, 5]
        session.commit()
        stored = audit.records(session, audit.AuditQuery(limit=4))
        assert [r.entry for r in reversed(stored)] == [entry(1), entry(2), odd, entry(4)]
        assert audit.verify(session).intact
    with session_factory(store)() as session:
        assert audit.verify(session).intact


def test_an_append_after_another_writer_moved_the_head_appends_after_its_records(
    store: Engine,
) -> None:
    """Another process (its own guesses) appended meanwhile: ours no longer holds, so the head
    is locked and read, and the records follow the other writer's."""
    ours, theirs = audit.ChainHeads(), audit.ChainHeads()
    assert appended(store, ours, 0) == [1]
    assert appended(store, theirs, 1, 2) == [2, 3]
    assert appended(store, ours, 3) == [4]
    assert appended(store, theirs, 4) == [5]
    with session_factory(store)() as session:
        assert audit.verify(session).intact
        assert [r.entry.at for r in audit.records(session, audit.AuditQuery())] == [
            4.0,
            3.0,
            2.0,
            1.0,
            0.0,
        ]


def test_a_rolled_back_append_s_head_is_not_followed(store: Engine) -> None:
    """Our guess names a record that was rolled back, and another writer has since stored a
    record of the same number: its hash tells them apart, and ours follows the stored one."""
    ours, theirs = audit.ChainHeads(), audit.ChainHeads()
    assert appended(store, ours, 0) == [1]
    assert appended(store, ours, 1, commit=False) == [2]  # guessed head: record 2, rolled back
    assert appended(store, theirs, 2) == [2]
    assert appended(store, ours, 3) == [3]
    with session_factory(store)() as session:
        verdict = audit.verify(session)
        assert verdict.intact, verdict.message
        assert verdict.records == 3
