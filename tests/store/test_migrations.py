"""Migrations: an empty store gets the tables of the models; running again changes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, select, text

from kiban.domain.manifests import parse_job_manifest
from kiban.scheduler.snapshot import DEFAULT_FLAVOR
from kiban.services.policy import latest_record, policy_generation
from kiban.store.db import MIGRATIONS, make_engine, migrate, session_factory
from kiban.store.models import ApiToken, Event, Job, Queue, Replica, Tenant
from kiban.store.schema import metadata

# Partial indexes (with a WHERE, or a DESC column) are beyond what Alembic's autogenerate
# compares; their presence is checked by name in test_partial_indexes_exist.
PARTIAL_INDEXES = {
    "ix_jobs_pending_order",
    "ix_jobs_pending_judged",
    "ix_jobs_state_submitted",
    "ix_jobs_submitted",
    "ix_jobs_array_state",
    "ix_jobs_array_gate",
}


def comparable_by_alembic(
    _object: object, name: str | None, type_: str, _reflected: bool, _compare_to: object
) -> bool:
    return not (type_ == "index" and name in PARTIAL_INDEXES)


def test_partial_indexes_exist(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        migrate(engine)
        names = {i["name"] for i in inspect(engine).get_indexes("jobs")}
        assert names >= PARTIAL_INDEXES
    finally:
        engine.dispose()


def schema(engine: Engine) -> dict[str, Any]:
    """Tables, their columns (name, type, nullable), indexes and foreign keys."""
    inspector = inspect(engine)
    out: dict[str, Any] = {}
    for table in sorted(inspector.get_table_names()):
        out[table] = {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)
            ],
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                for i in inspector.get_indexes(table)
            ),
            "foreign_keys": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"])
                for f in inspector.get_foreign_keys(table)
            ),
        }
    return out


def head_revision() -> str:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def test_migrate_creates_every_table_of_the_models(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        assert inspect(engine).get_table_names() == []
        migrate(engine)
        tables = schema(engine)
        assert set(tables) == set(metadata.tables) | {"alembic_version"}
        for name, table in metadata.tables.items():
            assert [c[0] for c in tables[name]["columns"]] == [c.name for c in table.columns]
            expected_nullable = {c.name: c.nullable for c in table.columns}
            assert {c[0]: c[2] for c in tables[name]["columns"]} == expected_nullable, name
        # Nothing in the models that the migrations lack (types, indexes, keys): what
        # ``alembic revision --autogenerate`` would write is empty.
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"include_object": comparable_by_alembic}
            )
            drift = compare_metadata(context, metadata)
        assert drift == []
        with engine.connect() as connection:
            version = connection.execute(text("SELECT version_num FROM alembic_version")).all()
        assert [v for (v,) in version] == [head_revision()]
    finally:
        engine.dispose()


def test_migrate_twice_is_a_no_op(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        migrate(engine)
        sessions = session_factory(engine)
        with sessions() as session:
            session.add(Tenant(name="vision", created_at=1.0))
            session.commit()
        before = schema(engine)
        migrate(engine)
        assert schema(engine) == before
        with sessions() as session:
            assert session.scalars(select(Tenant.name)).all() == ["vision"]
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT count(*) FROM alembic_version")).scalar()
        assert rows == 1
    finally:
        engine.dispose()


def test_migrate_on_a_second_engine_keeps_the_data(db_url: str) -> None:
    first = make_engine(db_url)
    migrate(first)
    with session_factory(first)() as session:
        session.add(Tenant(name="speech", created_at=2.0))
        session.commit()
    first.dispose()
    second = make_engine(db_url)  # a restart of the control plane
    try:
        migrate(second)
        with session_factory(second)() as session:
            assert session.get(Tenant, "speech") is not None
    finally:
        second.dispose()


def test_sqlite_store_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "kiban.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        migrate(engine)
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 30000
    finally:
        engine.dispose()
    # WAL is a property of the file: a plain connection (not made by kiban) sees it too.
    plain = sqlite3.connect(path)
    try:
        assert plain.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        plain.close()


def move_to(engine: Engine, revision: str, *, down: bool = False) -> None:
    """Upgrade (or downgrade) the store to ``revision``, as kiban.store.db.migrate does."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)


def test_0004_moves_gpu_quotas_to_the_default_flavor_and_writes_them_down(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        move_to(engine, "0003")
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO tenants (name, created_at) VALUES ('default', 1), ('vision', 1)")
            )
            connection.execute(
                text(
                    "INSERT INTO queues (name, tenant, gpu_quota, strategy, created_at) VALUES "
                    "('default', 'default', NULL, 'StrictFIFO', 1), "
                    "('vision', 'vision', 8, 'BestEffortFIFO', 2)"
                )
            )
        migrate(engine)
        with session_factory(engine)() as session:
            rows = {q.name: q for q in session.scalars(select(Queue))}
            assert rows["vision"].quota == {DEFAULT_FLAVOR: {"gpu": 8}}
            assert rows["vision"].gpu_quota == 8
            assert rows["default"].quota is None
            for row in rows.values():
                assert (row.cohort, row.borrowing_limit, row.lending_limit) == (None, {}, {})
                assert row.fair_share_weight == 1.0
            # The queues as they were are the first version of the policy.
            record = latest_record(session)
            assert record is not None and record.version == 1
            assert record.document == {
                "queues": [
                    {"name": "default", "tenant": "default", "strategy": "StrictFIFO"},
                    {
                        "name": "vision",
                        "tenant": "vision",
                        "strategy": "BestEffortFIFO",
                        "quota": {"gpu": 8},
                    },
                ]
            }
            vision = record.policy.queue("vision")
            assert vision is not None and vision.nominal == {DEFAULT_FLAVOR: 8}
        with engine.connect() as connection:
            no_quota = connection.execute(text("SELECT name FROM queues WHERE quota IS NULL"))
            assert no_quota.scalars().all() == ["default"]  # SQL NULL, not JSON null

        move_to(engine, "0003", down=True)
        with engine.connect() as connection:
            quotas = connection.execute(text("SELECT name, gpu_quota FROM queues ORDER BY name"))
            assert [tuple(r) for r in quotas] == [("default", None), ("vision", 8)]
        assert "policy_versions" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_0004_on_a_store_without_queues_writes_no_policy(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        migrate(engine)
        with session_factory(engine)() as session:
            assert policy_generation(session) == 0
            assert latest_record(session) is None
    finally:
        engine.dispose()


def test_0010_fails_jobs_stored_not_started_with_a_nul_in_their_spec(db_url: str) -> None:
    """Before submission refused them, a NUL in an env value was stored and the job stuck;
    now such a spec no longer parses, so the upgrade ends those jobs as a failed launch does."""

    def document(env: dict[str, str]) -> dict[str, Any]:
        task = {"name": "worker", "command": ["python", "t.py"], "env": env}
        return {
            "apiVersion": "kiban/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {"tasks": [task]},
        }

    stored = {
        "pending-nul": ("Pending", {"A": "x\x00y"}),
        "admitted-nul": ("Admitted", {"A": "\x00"}),
        "pending-fine": ("Pending", {"A": "a backslash: \\u0000"}),  # the text, no NUL
        "failed-nul": ("Failed", {"A": "\x00"}),
    }
    engine = make_engine(db_url)
    try:
        migrate(engine)
        with session_factory(engine)() as session:
            session.add(Tenant(name="t", created_at=1.0))
            session.flush()
            for job_id, (state, env) in stored.items():
                session.add(
                    Job(
                        id=job_id,
                        name="j",
                        tenant="t",
                        queue="default",
                        state=state,
                        spec=document(env),
                        submitted_at=1.0,
                        message="as it was",
                    )
                )
            session.flush()
            session.add(
                Replica(
                    job_id="admitted-nul",
                    attempt=1,
                    task="worker",
                    index=0,
                    rank=0,
                    node="n",
                    gpu_ids=[0, 1],
                    cpu_millis=1000,
                    memory=1,
                    active=True,
                    state="Running",
                )
            )
            session.add(
                ApiToken(
                    token_hash="h" * 64,
                    name="job",
                    role="job",
                    tenant="t",
                    created_at=1.0,
                    job_id="admitted-nul",
                )
            )
            session.commit()
        move_to(engine, "0009", down=True)  # as a store written before this revision
        migrate(engine)

        with session_factory(engine)() as session:
            jobs = {j.id: j for j in session.scalars(select(Job))}
            assert {k: j.state for k, j in jobs.items()} == {
                "pending-nul": "Failed",
                "admitted-nul": "Failed",
                "pending-fine": "Pending",
                "failed-nul": "Failed",
            }
            for job_id in ("pending-nul", "admitted-nul"):
                assert "NUL character" in (jobs[job_id].message or "")
                assert jobs[job_id].finished_at is not None
            assert jobs["failed-nul"].message == "as it was"
            (replica,) = session.scalars(select(Replica))
            assert (replica.active, replica.state) == (False, "Lost")  # its GPUs are free
            assert session.scalars(select(ApiToken)).all() == []
            failed_events = session.scalars(
                select(Event.object_name).where(Event.reason == "LaunchFailed")
            ).all()
            assert sorted(failed_events) == ["admitted-nul", "pending-nul"]
            parse_job_manifest(jobs["pending-fine"].spec)  # what is left parses
    finally:
        engine.dispose()


def test_0011_counts_the_gpus_of_jobs_not_ended_and_indexes_newest_first(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        move_to(engine, "0010_nul_specs")
        spec = (
            '{"spec": {"tasks": [{"replicas": 2, "resources": {"gpu": 4}}, '
            '{"resources": {"gpu": 1}}, {"replicas": 3}]}}'
        )
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO tenants (name, created_at) VALUES ('t', 1)"))
            for job_id, state in (("waits", "Pending"), ("runs", "Running"), ("done", "Succeeded")):
                connection.execute(
                    text(
                        "INSERT INTO jobs (id, name, tenant, queue, state, priority, spec, "
                        "submitted_at, attempt) VALUES (:id, :id, 't', 'q', :state, 0, :spec, 1, 1)"
                    ),
                    {"id": job_id, "state": state, "spec": spec},
                )
        migrate(engine)
        with engine.connect() as connection:
            gpus = dict(connection.execute(text("SELECT id, gpus FROM jobs")).all())
        assert gpus == {"waits": 9, "runs": 9, "done": None}  # 2 x 4 + 1 + 3 x 0
        names = {i["name"] for i in inspect(engine).get_indexes("jobs")}
        assert "ix_jobs_state" not in names
        assert {"ix_jobs_state_submitted", "ix_jobs_submitted", "ix_jobs_pending_judged"} <= names

        move_to(engine, "0010_nul_specs", down=True)
        names = {i["name"] for i in inspect(engine).get_indexes("jobs")}
        assert "ix_jobs_state" in names and "ix_jobs_submitted" not in names
        assert "gpus" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
    finally:
        engine.dispose()
