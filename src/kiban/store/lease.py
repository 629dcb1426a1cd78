"""A PostgreSQL database owned by one control plane: kiban's advisory lock, held and watched.

A session-level advisory lock (``pg_try_advisory_lock``) held on a connection of its own for the
server's life. Chosen over a lease row (holder, expiry, renewals) because it is the sturdier:

- it ends exactly when its holder does: kill -9 or a crash closes the connection and PostgreSQL
  releases the lock at once, and a machine that vanishes is noticed within about 25 s (TCP
  keepalives are set on both ends), where a lease row makes every successor wait out its
  expiry;
- it needs no clocks: a row's expiry compares the holder's idea of time with the database's,
  and a holder paused for longer than its lease (a stopped VM, a long GC) wakes up still
  believing it holds it and schedules beside its successor;
- it needs no table, so it is taken before the migrations run: nothing in the store is touched
  before the lock is held.

Its weak point is a connection that drops while the holder lives on (the database restarted, a
network cut): the lock went with it. The connection is checked every few seconds; when it is
gone the lock is taken again on a new one, and if another control plane took it meanwhile this
one is told (``on_lost``) that it no longer owns the database and must stop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

# The one advisory lock kiban takes in its database: "kiban-cp" in ASCII, as a bigint.
ADVISORY_KEY = 0x6B6962616E2D6370
CHECK_S = 5.0  # how often the lease's connection is checked
RETRY_S = 0.5  # how often a dropped connection, or a lock held by an ended process, is retried
WAIT_S = 10.0  # how long a claim waits for the lock of a process that ended to be freed
APPLICATION_NAME_MAX = 63  # PostgreSQL keeps this many bytes of application_name
# TCP keepalives of the lease's connection: a vanished peer is noticed after about 10 + 5 * 3 s.
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT = 10, 5, 3

log = logging.getLogger(__name__)


class DatabaseInUse(Exception):
    """Another session holds kiban's lock in this database; the message names it."""


class DatabaseUnreachable(Exception):
    """The database could not be reached to take the lock; the message says why."""


class DatabaseLease:
    """kiban's advisory lock in one PostgreSQL database, held on a connection of its own and
    watched from a thread (see the module's docstring)."""

    def __init__(
        self,
        engine: Engine,
        connection: Connection,
        on_lost: Callable[[str], None],
        check_s: float,
    ) -> None:
        self._engine = engine
        self._connection: Connection | None = connection
        self._on_lost = on_lost
        self._check_s = check_s
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="kiban-lease", daemon=True)
        self.lost = False

    @classmethod
    def claim(
        cls,
        url: str,
        holder: str,
        on_lost: Callable[[str], None],
        check_s: float = CHECK_S,
        ended: Callable[[str], bool] | None = None,
        wait_s: float = WAIT_S,
    ) -> DatabaseLease:
        """Take the lock, naming this session ``holder`` (what another claimant is told);
        DatabaseInUse naming the session that has it, DatabaseUnreachable when the database
        cannot be reached. ``on_lost`` is called (from the watching thread) if the lock is lost
        to another session for good. ``ended``: whether a holder, by its name, is a process
        known to have ended (killed a moment ago: PostgreSQL is still closing its session);
        such a holder is waited for, up to ``wait_s`` seconds."""
        engine = lease_engine(url, holder)
        shown = make_url(url).render_as_string(hide_password=True)
        deadline = time.monotonic() + wait_s
        try:
            while (connection := _connect_and_lock(engine)) is None:
                found = holder_of_lock(engine)
                if found is not None and (
                    ended is None or not ended(found[0]) or time.monotonic() > deadline
                ):
                    engine.dispose()
                    raise DatabaseInUse(f"the database {shown} is in use by {found[1]}")
                if time.monotonic() > deadline:
                    engine.dispose()
                    raise DatabaseInUse(f"the database {shown} is in use, by a session gone now")
                time.sleep(RETRY_S)
        except SQLAlchemyError as exc:
            engine.dispose()
            reason = getattr(exc, "orig", None) or exc
            raise DatabaseUnreachable(f"cannot reach the database {shown}: {reason}") from None
        lease = cls(engine, connection, on_lost, check_s)
        lease._watcher.start()
        return lease

    def release(self) -> None:
        """Stop watching, unlock and close the connection."""
        self._stop.set()
        if self._watcher.is_alive() and self._watcher is not threading.current_thread():
            self._watcher.join()
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(SQLAlchemyError):
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_KEY})
            with contextlib.suppress(SQLAlchemyError):
                connection.close()
        self._engine.dispose()

    def _watch(self) -> None:
        while not self._stop.wait(self._check_s if self.held else RETRY_S):
            if not self.check():
                return

    @property
    def held(self) -> bool:
        """Whether the lock's connection was there at the last check."""
        return self._connection is not None

    def check(self) -> bool:
        """Check the lock's connection; when it dropped, take the lock again on a new one.
        False once the lock is lost for good (``on_lost`` was called): another session took it
        meanwhile. While the database cannot be reached, True with ``held`` False: the watcher
        tries again every ``RETRY_S`` and learns on reconnecting whether another took it."""
        if self.lost:
            return False
        if self._connection is not None:
            try:
                self._connection.execute(text("SELECT 1"))
                return True
            except SQLAlchemyError as exc:
                log.warning("the database lease's connection dropped (%s); retaking it", exc)
                with contextlib.suppress(SQLAlchemyError):
                    self._connection.close()
                self._connection = None
        try:
            self._connection = _connect_and_lock(self._engine)
            found = holder_of_lock(self._engine) if self._connection is None else None
        except SQLAlchemyError as exc:
            log.warning("cannot reach the database to take the lease again: %s", exc)
            return True
        if self._connection is not None:
            log.warning("the database lease is held again")
            return True
        if found is None:  # the other let go meanwhile: take it at the next check
            return True
        self.lost = True
        self._on_lost(
            f"{found[1]} took the database while this control plane's connection to it was "
            "down; this one no longer owns it"
        )
        return False


def lease_engine(url: str, holder: str) -> Engine:
    """An engine of single, unpooled connections named ``holder`` (PostgreSQL's
    ``application_name``, which another claimant reads) that keep TCP alive."""
    connect_args: dict[str, object] = {
        "application_name": holder.encode()[:APPLICATION_NAME_MAX].decode(errors="ignore"),
        "keepalives": 1,
        "keepalives_idle": KEEPALIVE_IDLE_S,
        "keepalives_interval": KEEPALIVE_INTERVAL_S,
        "keepalives_count": KEEPALIVE_COUNT,
    }
    return create_engine(url, poolclass=NullPool, connect_args=connect_args)


def _connect_and_lock(engine: Engine) -> Connection | None:
    """A connection holding the lock, or None when another session holds it."""
    connection = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        # The database's side of the keepalives, so that it frees the lock of a vanished peer.
        for name, value in (
            ("tcp_keepalives_idle", KEEPALIVE_IDLE_S),
            ("tcp_keepalives_interval", KEEPALIVE_INTERVAL_S),
            ("tcp_keepalives_count", KEEPALIVE_COUNT),
        ):
            connection.execute(text(f"SET {name} = {int(value)}"))
        taken = connection.execute(
            text("SELECT pg_try_advisory_lock(:key)"), {"key": ADVISORY_KEY}
        ).scalar_one()
    except BaseException:
        connection.close()
        raise
    if not taken:
        connection.close()
        return None
    return connection


def holder_of_lock(engine: Engine) -> tuple[str, str] | None:
    """Who holds kiban's advisory lock in this database, as PostgreSQL sees the session: its
    application name, and a description (the name, where it connected from and since when);
    None when nobody holds it now."""
    query = text(
        "SELECT a.application_name, host(a.client_addr), a.backend_start, l.pid "
        "FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND l.classid::bigint = :high AND l.objid::bigint = :low "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    with engine.connect() as connection:
        row = connection.execute(
            query, {"high": ADVISORY_KEY >> 32, "low": ADVISORY_KEY & 0xFFFFFFFF}
        ).first()
    if row is None:
        return None
    name, address, started, backend = row
    parts = [name or f"database session {backend}"]
    if address:
        parts.append(f"connected from {address}")
    if started is not None:
        parts.append(f"since {started.astimezone().strftime('%Y-%m-%d %H:%M:%S')}")
    return name or "", ", ".join(parts)
