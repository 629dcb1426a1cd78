"""Migrations: an empty store gets the tables of the models; running again changes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, select, text

from kiban.store.db import MIGRATIONS, make_engine, migrate, session_factory
from kiban.store.models import Base, Tenant

# Partial indexes (with a WHERE, or a DESC column) are beyond what Alembic's autogenerate
# compares; their presence is checked by name in test_partial_indexes_exist.
PARTIAL_INDEXES = {"ix_jobs_pending_order"}


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
        assert set(tables) == set(Base.metadata.tables) | {"alembic_version"}
        for name, table in Base.metadata.tables.items():
            assert [c[0] for c in tables[name]["columns"]] == [c.name for c in table.columns]
            expected_nullable = {c.name: c.nullable for c in table.columns}
            assert {c[0]: c[2] for c in tables[name]["columns"]} == expected_nullable, name
        # Nothing in the models that the migrations lack (types, indexes, keys): what
        # ``alembic revision --autogenerate`` would write is empty.
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"include_object": comparable_by_alembic}
            )
            drift = compare_metadata(context, Base.metadata)
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
