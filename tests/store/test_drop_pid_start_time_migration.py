"""0026_drop_pid_start_time: the unused column goes; replicas stored before stay readable,
and a downgrade gives the column back empty (both stores)."""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.orm import Session
from test_migrations import move_to

from kiban.store.db import make_engine, migrate
from kiban.store.models import Replica

BEFORE = "0025_member_usage"


def replica_columns(engine_url: str) -> list[str]:
    engine = make_engine(engine_url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(text("SELECT * FROM replicas LIMIT 0")).keys())
    finally:
        engine.dispose()


def test_the_column_goes_and_stored_replicas_stay_readable(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        move_to(engine, BEFORE)
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO tenants (name, created_at) VALUES ('t', 1)"))
            connection.execute(
                text(
                    "INSERT INTO jobs (id, name, tenant, queue, state, priority, spec, "
                    "submitted_at, attempt) VALUES ('a', 'a', 't', 'q', 'Running', 0, '{}', 1, 1)"
                )
            )
            connection.execute(
                text(
                    'INSERT INTO replicas (job_id, attempt, task, "index", rank, node, gpu_ids, '
                    "cpu_millis, memory, active, pid, pid_start_time, state, handle) VALUES "
                    "('a', 1, 'worker', 0, 0, 'node-0', '[0, 1]', 1000, 1024, :active, 4242, "
                    "17.5, 'Running', '4242 17.5')"
                ),
                {"active": True},
            )
        migrate(engine)
        assert "pid_start_time" not in replica_columns(db_url)
        with Session(engine) as session:
            replica = session.scalars(select(Replica)).one()
            assert (replica.job_id, replica.node, replica.gpu_ids) == ("a", "node-0", [0, 1])
            assert (replica.pid, replica.handle, replica.active) == (4242, "4242 17.5", True)
        move_to(engine, BEFORE, down=True)
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT pid, pid_start_time FROM replicas"))
            assert [tuple(r) for r in rows] == [(4242, None)]
    finally:
        engine.dispose()
