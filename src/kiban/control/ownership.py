"""One control plane per home and per store: a lock on the home, a lease on a shared database.

Two control planes on one home overwrite each other's url file and node inventory; two on one
database both schedule its jobs. ``kiban up`` claims the home before it reads or writes anything
else there, then the store before it opens it, holds both for its life, and refuses to start,
naming the holder, when another control plane has either.

- **The home**: an exclusive ``flock`` on ``<home>/control-plane.lock``. The kernel drops it when
  the process ends, however it ends (kill -9 included), so it cannot go stale as a pid file
  does; the file's content (pid, host, URL, since when) only describes the holder for another's
  error message, and is read only while someone holds the lock. ``flock`` rather than ``fcntl``
  byte-range locks: those belong to the process, not to a descriptor, and vanish when it closes
  *any* descriptor of the file (reading the holder's details would drop its own lock). The
  descriptor is close-on-exec, so the replicas the server starts do not keep the home locked
  after it dies. A SQLite store outside the home gets the same kind of lock beside its file.
- **A PostgreSQL store**: kiban's advisory lock in the database, held on a connection of its
  own for the server's life and watched (``kiban.store.lease`` says why a lock rather than a
  lease row). It is taken before the store is opened, so nothing there is touched first.

This module imports nothing heavy: ``kiban up`` claims the home before it loads the server.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiban.store.lease import DatabaseLease

LOCK_FILE = "control-plane.lock"


class OwnershipError(Exception):
    """Another control plane owns the home or the store (the message names it), or the lock
    cannot be taken at all."""


@dataclass(frozen=True)
class Holder:
    """A control plane, as another one's error message names it."""

    pid: int
    host: str
    url: str | None = None
    since: float | None = None

    @classmethod
    def this_process(cls, url: str | None = None) -> Holder:
        return cls(os.getpid(), socket.gethostname(), url, time.time())

    def describe(self) -> str:
        """``pid 4242 at http://127.0.0.1:8470, since 2025-05-01 12:03:04``."""
        text = f"pid {self.pid}"
        if self.host != socket.gethostname():
            text += f" on {self.host}"
        text += f" at {self.url}" if self.url else ", still starting"
        if self.since is not None:
            text += f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.since))}"
        return text

    def session_name(self) -> str:
        """``kiban 4242@host-a http://10.0.0.5:8470``: how a database session names it."""
        return f"kiban {self.pid}@{self.host} {self.url or ''}".strip()

    def to_json(self) -> str:
        fields = {"pid": self.pid, "host": self.host, "url": self.url, "since": self.since}
        return json.dumps(fields)

    @classmethod
    def from_json(cls, data: str) -> Holder | None:
        try:
            fields = json.loads(data)
            return cls(
                int(fields["pid"]),
                str(fields["host"]),
                None if fields.get("url") is None else str(fields["url"]),
                None if fields.get("since") is None else float(fields["since"]),
            )
        except (ValueError, KeyError, TypeError):
            return None


# -- files: the home, and a SQLite store outside it --------------------------------------------
class FileLock:
    """An exclusive ``flock`` on a file, held until ``release`` or the end of the process."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def claim(cls, path: Path, what: str, holder: Holder) -> FileLock:
        """Lock ``path`` (created if missing) and write ``holder`` in it; OwnershipError naming
        the holder when another process has it. ``what`` names the thing owned, for the error."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise OwnershipError(f"cannot open {path} to lock {what}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OwnershipError(
                f"{what} is in use by another kiban control plane ({read_holder(path)}); one "
                "control plane owns it at a time: stop that one first"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise OwnershipError(f"cannot lock {path} for {what}: {exc.strerror}") from None
        lock = cls(path, fd)
        lock.describe(holder)
        return lock

    def describe(self, holder: Holder) -> None:
        """Write who holds the lock (another control plane's error message reads it)."""
        if self._fd is None:
            return
        data = holder.to_json().encode()
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))

    def release(self) -> None:
        """Unlock (the file stays: removing it would let two processes lock two inodes)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)


def read_holder(path: Path) -> str:
    """How a locked file describes its holder, for an error message."""
    for _ in range(3):  # the holder may be rewriting it this instant
        try:
            holder = Holder.from_json(path.read_text())
        except OSError:
            holder = None
        if holder is not None:
            return holder.describe()
        time.sleep(0.05)
    return "its pid is not written yet"


def ended_here(session_name: str) -> bool:
    """Whether a database session named as ``Holder.session_name`` names is a process of this
    machine that has ended (killed a moment ago, its session still closing)."""
    found = re.match(r"kiban (\d+)@(\S+)", session_name)
    if found is None or found.group(2) != socket.gethostname():
        return False
    try:
        os.kill(int(found.group(1)), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


# -- both ----------------------------------------------------------------------------------------
class Ownership:
    """What one ``kiban up`` holds: its home's lock and, for a store outside the home, the
    store's lock or lease. Claimed in that order, released together."""

    def __init__(self, home: Path, lock: FileLock) -> None:
        self.home = home
        self._home_lock = lock
        self._store: FileLock | DatabaseLease | None = None
        self._holder = Holder.this_process()

    @classmethod
    def claim_home(cls, home: Path) -> Ownership:
        """Lock the home (created if missing) before anything else in it is read or written."""
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OwnershipError(f"cannot create the home {home}: {exc.strerror}") from None
        holder = Holder.this_process()
        lock = FileLock.claim(home / LOCK_FILE, f"home {home}", holder)
        ownership = cls(home, lock)
        ownership._holder = holder
        return ownership

    def announce(self, url: str) -> None:
        """Record the URL this control plane serves at (named in another's error message)."""
        self._holder = Holder(self._holder.pid, self._holder.host, url, self._holder.since)
        self._home_lock.describe(self._holder)

    def claim_store(self, db_url: str | None, on_lost: Callable[[str], None]) -> None:
        """Claim the store before it is opened: a PostgreSQL database by kiban's advisory lock
        (``on_lost`` is called if it is lost for good), a SQLite file outside the home by a
        lock file beside it (the default store, in the home, is the home's)."""
        if db_url is None:
            return
        from sqlalchemy.engine import make_url

        parsed = make_url(db_url)
        backend = parsed.get_backend_name()
        if backend == "postgresql":
            from kiban.store.lease import DatabaseInUse, DatabaseLease, DatabaseUnreachable

            name = self._holder.session_name()
            try:
                self._store = DatabaseLease.claim(db_url, name, on_lost, ended=ended_here)
            except DatabaseInUse as exc:
                raise OwnershipError(
                    f"{exc}, another kiban control plane; two control planes on one database "
                    "would both schedule its jobs: stop that one first, or give this one a "
                    "database of its own (--db)"
                ) from None
            except DatabaseUnreachable as exc:
                raise OwnershipError(str(exc)) from None
        elif backend == "sqlite" and parsed.database and parsed.database != ":memory:":
            database = Path(parsed.database).expanduser().resolve()
            if database.is_relative_to(self.home.resolve()):
                return
            lock_path = database.with_name(database.name + ".lock")
            self._store = FileLock.claim(lock_path, f"the store {database}", self._holder)

    def release(self) -> None:
        if self._store is not None:
            self._store.release()
            self._store = None
        self._home_lock.release()
