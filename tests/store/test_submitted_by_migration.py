"""0012_submitted_by: jobs stored before it learn who submitted them from their events."""

from __future__ import annotations

from sqlalchemy import text
from test_migrations import move_to

from kiban.store.db import make_engine, migrate


def test_submitters_are_filled_in_from_the_submitted_events(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        move_to(engine, "0009")
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO tenants (name, created_at) VALUES ('t', 1)"))
            for job in ("a", "b", "c"):
                connection.execute(
                    text(
                        "INSERT INTO jobs (id, name, tenant, queue, state, priority, spec, "
                        "submitted_at, attempt) VALUES "
                        "(:id, 'x', 't', 'q', 'Pending', 0, '{}', 1, 1)"
                    ),
                    {"id": job},
                )
            for job, reason, message in (
                ("a", "Submitted", "submitted by alice to queue q (1 replica, 0 GPUs)"),
                ("b", "Submitted", "something else"),
                ("b", "Started", "submitted by mallory to queue q"),
            ):
                connection.execute(
                    text(
                        "INSERT INTO events (object_kind, object_name, tenant, type, reason, "
                        "message, at) VALUES ('Job', :job, 't', 'Normal', :reason, :message, 1)"
                    ),
                    {"job": job, "reason": reason, "message": message},
                )
        migrate(engine)
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT id, submitted_by FROM jobs ORDER BY id"))
            assert [tuple(r) for r in rows] == [("a", "alice"), ("b", None), ("c", None)]
        move_to(engine, "0009", down=True)
        with engine.connect() as connection:
            columns = connection.execute(text("SELECT * FROM jobs LIMIT 0")).keys()
            assert "submitted_by" not in columns
    finally:
        engine.dispose()
