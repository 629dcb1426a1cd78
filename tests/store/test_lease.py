"""kiban's advisory lock in a PostgreSQL database: one holder, named to others, taken back when
its connection drops, and lost (with the holder told) when another took it meanwhile."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from kiban.devtools.postgres import ThrowawayPostgres
from kiban.store.lease import ADVISORY_KEY, DatabaseInUse, DatabaseLease, DatabaseUnreachable

pytestmark = pytest.mark.postgres
HOUR = 3600.0  # the tests run the checks themselves


@pytest.fixture
def database(postgres_server: ThrowawayPostgres) -> str:
    return postgres_server.create_database(f"l_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def leases() -> Iterator[list[DatabaseLease]]:
    held: list[DatabaseLease] = []
    yield held
    for lease in held:
        lease.release()


def lock_holders(url: str) -> list[int]:
    """The backend pids holding kiban's lock in the database."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return list(
                connection.scalars(
                    text(
                        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND classid::bigint = :high AND objid::bigint = :low "
                        "AND database = (SELECT oid FROM pg_database "
                        "WHERE datname = current_database())"
                    ),
                    {"high": ADVISORY_KEY >> 32, "low": ADVISORY_KEY & 0xFFFFFFFF},
                )
            )
    finally:
        engine.dispose()


def terminate(url: str, pids: list[int]) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            for pid in pids:
                connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        engine.dispose()


def claim(url: str, name: str, leases: list[DatabaseLease], lost: list[str]) -> DatabaseLease:
    lease = DatabaseLease.claim(url, name, lost.append, check_s=HOUR)
    leases.append(lease)
    return lease


def test_a_second_claim_is_refused_naming_the_holder(
    database: str, leases: list[DatabaseLease]
) -> None:
    claim(database, "kiban 4242@host-a http://10.0.0.5:8470", leases, [])
    with pytest.raises(DatabaseInUse) as refused:
        DatabaseLease.claim(database, "kiban 7@host-b", lambda _: None)
    message = str(refused.value)
    assert "is in use by kiban 4242@host-a http://10.0.0.5:8470, connected from" in message
    assert "since " in message
    assert "postgresql+psycopg://" in message


def test_a_released_lease_is_free_and_another_database_is_apart(
    database: str, postgres_server: ThrowawayPostgres, leases: list[DatabaseLease]
) -> None:
    first = claim(database, "kiban 1@a", leases, [])
    other = postgres_server.create_database(f"l_{uuid.uuid4().hex[:12]}")
    claim(other, "kiban 2@b", leases, [])  # advisory locks are per database
    first.release()
    claim(database, "kiban 3@c", leases, [])


def test_an_unreachable_database_is_a_clear_error(postgres_server: ThrowawayPostgres) -> None:
    url = postgres_server.url_for("no_such_database")
    with pytest.raises(DatabaseUnreachable, match=r"cannot reach the database .*no_such_database"):
        DatabaseLease.claim(url, "kiban 1@a", lambda _: None)


def test_a_dropped_connection_takes_the_lock_again(
    database: str, leases: list[DatabaseLease]
) -> None:
    lost: list[str] = []
    lease = claim(database, "kiban 1@a", leases, lost)
    (backend,) = lock_holders(database)
    terminate(database, [backend])
    assert lease.check()
    (again,) = lock_holders(database)
    assert again != backend and lease.held and not lease.lost
    assert lost == []


def test_the_lock_taken_by_another_meanwhile_is_lost_and_the_holder_told(
    database: str, leases: list[DatabaseLease]
) -> None:
    lost: list[str] = []
    lease = claim(database, "kiban 1@a", leases, lost)
    terminate(database, lock_holders(database))
    claim(database, "kiban 2@b http://10.0.0.6:8470", leases, [])
    assert not lease.check()
    assert lease.lost
    (message,) = lost
    assert message.startswith("kiban 2@b http://10.0.0.6:8470, connected from")
    assert "no longer owns it" in message


def test_a_holder_known_to_have_ended_is_waited_for_a_while(
    database: str, leases: list[DatabaseLease]
) -> None:
    """A control plane killed a moment ago: PostgreSQL may still be closing its session."""
    first = claim(database, "kiban 1@a", leases, [])
    releasing = threading.Timer(0.5, first.release)
    releasing.start()
    try:
        lease = DatabaseLease.claim(
            database, "kiban 2@a", lambda _: None, check_s=HOUR, ended=lambda name: True
        )
    finally:
        releasing.join()
    leases.append(lease)
    assert lock_holders(database)  # the second holds it now
    # one that is not known to have ended is refused at once, one that never lets go in time
    seen: list[str] = []

    def alive(name: str) -> bool:
        seen.append(name)
        return False

    with pytest.raises(DatabaseInUse, match="in use by kiban 2@a"):
        DatabaseLease.claim(database, "kiban 3@a", lambda _: None, ended=alive)
    assert seen == ["kiban 2@a"]
    with pytest.raises(DatabaseInUse, match="in use by kiban 2@a"):
        DatabaseLease.claim(database, "kiban 3@a", lambda _: None, ended=lambda _: True, wait_s=0.3)
