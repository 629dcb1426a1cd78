"""0013_stop_intents: stored stop intents checked by the store, unknown ones mapped to "fail"
(and said so), and the attempts a job's own failures ended counted; down again in place."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError, StatementError
from test_migrations import move_to

from kiban.domain.stop_intents import StopIntent
from kiban.store.db import make_engine, migrate, session_factory
from kiban.store.models import Job

# id, state, stop intent, attempt
JOBS = [
    ("cancelling", "Stopping", "cancel", 1),
    ("evicting", "Stopping", "evict", 3),  # no intent of kiban's: it used to end as Failed
    ("no-intent", "Stopping", None, 1),
    ("running", "Running", None, 2),
]


def store_at_0012(engine: Engine) -> None:
    move_to(engine, "0012")
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO tenants (name, created_at) VALUES ('t', 1)"))
        for job_id, state, intent, attempt in JOBS:
            connection.execute(
                text(
                    "INSERT INTO jobs (id, name, tenant, queue, state, priority, spec, "
                    "submitted_at, attempt, stop_intent) VALUES "
                    "(:id, 'x', 't', 'q', :state, 0, '{}', 1, :attempt, :intent)"
                ),
                {"id": job_id, "state": state, "attempt": attempt, "intent": intent},
            )
        connection.execute(
            text(
                'INSERT INTO replicas (job_id, attempt, task, "index", rank, node, gpu_ids, '
                "cpu_millis, memory, active, state) VALUES "
                "('evicting', 3, 'w', 0, 0, 'n', '[]', 0, 0, true, 'Running')"
            )
        )


def rows(engine: Engine, query: str) -> list[tuple[object, ...]]:
    with engine.connect() as connection:
        return [tuple(r) for r in connection.execute(text(query))]


def set_intent(engine: Engine, intent: str) -> None:
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE jobs SET stop_intent = :intent WHERE id = 'running'"), {"intent": intent}
        )


def test_stored_intents_are_checked_and_unknown_ones_fail_and_say_so(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        store_at_0012(engine)
        migrate(engine)
        assert rows(engine, "SELECT id, stop_intent, failed_attempts FROM jobs ORDER BY id") == [
            ("cancelling", "cancel", 0),
            ("evicting", "fail", 2),  # every earlier attempt counted, as the limit did
            ("no-intent", "fail", 0),
            ("running", None, 1),
        ]
        events = "SELECT object_name, type, reason, message FROM events ORDER BY object_name"
        assert rows(engine, events) == [
            ("evicting", "Warning", "StopIntentUnknown", "stop intent 'evict' is unknown; "
             "it stops as failed"),
            ("no-intent", "Warning", "StopIntentUnknown", "stop intent None is unknown; "
             "it stops as failed"),
        ]  # fmt: skip
        assert rows(engine, "SELECT job_id FROM replicas") == [("evicting",)]  # in place

        with pytest.raises(IntegrityError):
            set_intent(engine, "evict")
        set_intent(engine, "preempt")
        with session_factory(engine)() as session:
            job = session.get(Job, "running")
            assert job is not None and job.stop_intent is StopIntent.PREEMPT
            job.stop_intent = "evict"  # type: ignore[assignment]
            with pytest.raises(StatementError, match="'evict' is not among the defined"):
                session.flush()

        move_to(engine, "0012", down=True)
        with engine.connect() as connection:
            columns = connection.execute(text("SELECT * FROM jobs LIMIT 0")).keys()
        assert "failed_attempts" not in columns
        set_intent(engine, "evict")  # no longer checked
        assert rows(engine, "SELECT job_id FROM replicas") == [("evicting",)]
        migrate(engine)  # and up again: the value set meanwhile is mapped
        assert rows(engine, "SELECT stop_intent FROM jobs WHERE id = 'running'") == [("fail",)]
    finally:
        engine.dispose()
