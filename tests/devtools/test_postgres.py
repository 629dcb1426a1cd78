"""The throwaway PostgreSQL server used by tests and benchmarks (kiban.devtools.postgres)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from kiban.devtools.postgres import (
    PostgresStartError,
    PostgresUnavailable,
    ThrowawayPostgres,
    find_postgres_bin,
)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        find_postgres_bin() is None,
        reason="PostgreSQL binaries not found; run scripts/ensure-postgres.sh",
    ),
]


@pytest.fixture(scope="module")
def pg() -> Iterator[ThrowawayPostgres]:
    with ThrowawayPostgres() as server:
        yield server


def _port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _table_names(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_find_postgres_bin() -> None:
    bin_dir = find_postgres_bin()
    assert bin_dir is not None
    for name in ("initdb", "pg_ctl", "postgres"):
        assert (bin_dir / name).exists()


def test_url_shape_and_settings(pg: ThrowawayPostgres) -> None:
    assert pg.url == f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}/kiban"
    engine = sa.create_engine(pg.url)
    try:
        with engine.connect() as conn:
            settings = {
                name: conn.execute(sa.text(f"SHOW {name}")).scalar_one()
                for name in (
                    "fsync",
                    "synchronous_commit",
                    "full_page_writes",
                    "max_connections",
                    "listen_addresses",
                )
            }
            assert conn.execute(sa.text("SELECT current_database()")).scalar_one() == "kiban"
    finally:
        engine.dispose()
    assert settings == {
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "max_connections": "200",
        "listen_addresses": "127.0.0.1",
    }


def test_roundtrip_with_sqlalchemy(pg: ThrowawayPostgres) -> None:
    engine = sa.create_engine(pg.url)
    metadata = sa.MetaData()
    jobs = sa.Table(
        "jobs",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
    )
    try:
        metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(
                jobs.insert(),
                [{"name": "train", "gpus": 8}, {"name": "serve", "gpus": 1}],
            )
        with engine.connect() as conn:
            rows = conn.execute(sa.select(jobs.c.name, jobs.c.gpus).order_by(jobs.c.id)).all()
        assert [tuple(r) for r in rows] == [("train", 8), ("serve", 1)]
    finally:
        metadata.drop_all(engine)
        engine.dispose()


def test_create_database_is_independent(pg: ThrowawayPostgres) -> None:
    url = pg.create_database("kiban_other")
    assert url == f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}/kiban_other"
    assert _table_names(url) == set()

    other = sa.create_engine(url)
    main = sa.create_engine(pg.url)
    try:
        with other.begin() as conn:
            conn.execute(sa.text("CREATE TABLE only_in_other (x int)"))
            conn.execute(sa.text("INSERT INTO only_in_other VALUES (42)"))
        with main.begin() as conn:
            conn.execute(sa.text("CREATE TABLE only_in_main (y int)"))
        with other.connect() as conn:
            assert conn.execute(sa.text("SELECT current_database()")).scalar_one() == "kiban_other"
            assert conn.execute(sa.text("SELECT x FROM only_in_other")).scalar_one() == 42
    finally:
        other.dispose()
        with main.begin() as conn:
            conn.execute(sa.text("DROP TABLE IF EXISTS only_in_main"))
        main.dispose()

    assert "only_in_main" not in _table_names(url)
    assert "only_in_other" not in _table_names(pg.url)

    pg.drop_database("kiban_other")
    with pytest.raises(sa.exc.OperationalError):
        _table_names(url)


def test_create_database_rejects_odd_names(pg: ThrowawayPostgres) -> None:
    with pytest.raises(ValueError):
        pg.create_database("x; DROP DATABASE kiban")


def test_stop_removes_data_dir_and_closes_port() -> None:
    server = ThrowawayPostgres(database="stopme")
    server.start()
    base, port = server.base_dir, server.port
    try:
        assert server.running
        assert (server.data_dir / "PG_VERSION").exists()
        assert _port_accepts(port)
        engine = sa.create_engine(server.url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
        engine.dispose()
    finally:
        server.stop()

    assert not server.running
    assert not base.exists()
    assert not _port_accepts(port)
    server.stop()  # idempotent
    with pytest.raises(RuntimeError):
        _ = server.url


def test_missing_binaries_raise_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PostgresUnavailable, match=r"scripts/ensure-postgres\.sh"):
        ThrowawayPostgres(bin_dir=tmp_path).start()


def test_start_failure_reports_log_and_cleans_up() -> None:
    server = ThrowawayPostgres(settings={"shared_buffers": "not-a-size"})
    with pytest.raises(PostgresStartError, match="shared_buffers") as excinfo:
        server.start()
    message = str(excinfo.value)
    assert "--- tail of " in message
    log_path = Path(message.split("--- tail of ", 1)[1].split(" ---", 1)[0])
    assert log_path.name == "server.log"
    assert not log_path.parent.exists()
    assert not server.running
