"""A throwaway PostgreSQL server for tests and benchmarks.

The server runs from the distribution's binaries (Debian's ``postgresql`` package; install it
with ``scripts/ensure-postgres.sh``), keeps its data in a fresh temporary directory, listens
only on 127.0.0.1 on a free port (plus a unix socket inside the temporary directory), trusts
every local connection, and trades durability for speed (``fsync=off`` and friends).

``initdb`` and ``postgres`` refuse to run as root, so when this process is root the server runs
as the unprivileged ``postgres`` system user (created by the Debian package) through
``runuser`` (or ``setpriv``), with the temporary directory owned by that user.

Usage::

    with ThrowawayPostgres() as pg:
        engine = sqlalchemy.create_engine(pg.url)
        other_url = pg.create_database("test_jobs")

The server is stopped and its directory removed by :meth:`ThrowawayPostgres.stop`, on leaving
the ``with`` block, or at interpreter exit, whichever comes first.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

__all__ = [
    "PostgresStartError",
    "PostgresUnavailable",
    "ThrowawayPostgres",
    "find_postgres_bin",
]

ENSURE_HINT = "run scripts/ensure-postgres.sh to install PostgreSQL (Debian's postgresql package)"
BIN_ENV_VAR = "KIBAN_POSTGRES_BIN"
"""Environment variable naming a directory holding initdb, pg_ctl and postgres."""

_REQUIRED_BINARIES = ("initdb", "pg_ctl", "postgres")
_SEARCH_GLOBS = ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin")
_UNIX_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; leave room for "/.s.PGSQL.NNNNN"
_PORT_IN_USE = re.compile(r"could not bind|address already in use", re.IGNORECASE)
_DB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

TEST_SETTINGS: Mapping[str, str | int] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": 200,
}
"""Settings that make the server fast and roomy for tests, at the cost of durability."""


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries (or the user to run them as) are missing."""


class PostgresStartError(RuntimeError):
    """The throwaway server could not be initialised or started."""


def _has_binaries(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in _REQUIRED_BINARIES)


def _version_key(directory: Path) -> tuple[int, ...]:
    """Sort key for /usr/lib/postgresql/<version>/bin: newest version last."""
    numbers = re.findall(r"\d+", directory.parent.name)
    return tuple(int(n) for n in numbers)


def find_postgres_bin() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None.

    Looks at ``$KIBAN_POSTGRES_BIN``, then at ``initdb`` on PATH (following symlinks, so
    Debian's /usr/local/bin links lead to /usr/lib/postgresql/N/bin), then at Debian's
    ``/usr/lib/postgresql/*/bin`` (newest version first) and the PGDG ``/usr/pgsql-*/bin``.
    """
    override = os.environ.get(BIN_ENV_VAR)
    if override:
        directory = Path(override)
        return directory if _has_binaries(directory) else None

    on_path = shutil.which("initdb")
    if on_path is not None:
        for directory in (Path(on_path).resolve().parent, Path(on_path).parent):
            if _has_binaries(directory):
                return directory

    for pattern in _SEARCH_GLOBS:
        candidates = sorted(Path("/").glob(pattern.lstrip("/")), key=_version_key)
        for directory in reversed(candidates):
            if _has_binaries(directory):
                return directory
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _conf_value(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int | float):
        return str(value)
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no server log at {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


class ThrowawayPostgres:
    """A PostgreSQL server in a temporary directory, for tests and benchmarks.

    Args:
        database: name of the database created at start; :attr:`url` points at it.
        superuser: name of the bootstrap superuser (trust auth: no password).
        port: TCP port on 127.0.0.1; None picks a free one.
        bin_dir: directory with initdb/pg_ctl/postgres; None uses :func:`find_postgres_bin`.
        base_dir: where to make the temporary directory; None uses the system default.
        settings: extra ``postgresql.conf`` settings, applied after :data:`TEST_SETTINGS`.
        run_as: system user to run the server as when this process is root.
        start_timeout: seconds to wait for the server to accept connections.
    """

    def __init__(
        self,
        *,
        database: str = "kiban",
        superuser: str = "postgres",
        port: int | None = None,
        bin_dir: Path | str | None = None,
        base_dir: Path | str | None = None,
        settings: Mapping[str, str | int | float | bool] | None = None,
        run_as: str = "postgres",
        start_timeout: float = 60.0,
    ) -> None:
        _check_db_name(database)
        self.database = database
        self.superuser = superuser
        self._requested_port = port
        self._bin_dir_arg = Path(bin_dir) if bin_dir is not None else None
        self._base_dir_arg = Path(base_dir) if base_dir is not None else None
        self._settings: dict[str, str | int | float | bool] = dict(TEST_SETTINGS)
        self._settings.update(settings or {})
        self._run_as = run_as
        self._start_timeout = start_timeout

        self._bin_dir: Path | None = None
        self._base: Path | None = None
        self._port: int | None = None
        self._prefix: list[str] = []
        self._owner_pid: int | None = None
        self._running = False
        self._base_conf = ""

    # ------------------------------------------------------------------ properties

    @property
    def running(self) -> bool:
        return self._running

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the throwaway PostgreSQL server is not started")
        return self._port

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def base_dir(self) -> Path:
        """The temporary directory: data/, server.log and the unix socket live here."""
        if self._base is None:
            raise RuntimeError("the throwaway PostgreSQL server is not started")
        return self._base

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base_dir

    @property
    def log_path(self) -> Path:
        return self.base_dir / "server.log"

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the database created at start."""
        return self.url_for(self.database)

    def url_for(self, database: str) -> str:
        """SQLAlchemy URL (psycopg 3 driver) for ``database`` on this server."""
        return f"postgresql+psycopg://{self.superuser}@{self.host}:{self.port}/{database}"

    def conninfo(self, database: str | None = None) -> str:
        """libpq connection string, for ``psycopg.connect``."""
        return make_conninfo(
            host=self.host,
            port=self.port,
            user=self.superuser,
            dbname=database or self.database,
        )

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Initialise a data directory, start the server, create :attr:`database`.

        Returns once the server accepts connections. Idempotent while running.
        """
        if self._running:
            return self
        bin_dir = self._bin_dir_arg or find_postgres_bin()
        if bin_dir is None or not _has_binaries(bin_dir):
            where = f" in {bin_dir}" if bin_dir is not None else ""
            raise PostgresUnavailable(
                f"PostgreSQL server binaries (initdb, pg_ctl, postgres) not found{where}; "
                + ENSURE_HINT
            )
        self._bin_dir = bin_dir
        self._prefix, owner = self._run_as_prefix()

        base = Path(tempfile.mkdtemp(prefix="kiban-pg-", dir=self._base_dir_arg))
        self._base = base
        self._owner_pid = os.getpid()
        atexit.register(self.stop)
        try:
            if len(str(base)) > _UNIX_SOCKET_PATH_MAX:
                raise PostgresStartError(
                    f"temporary directory path {base} is too long for a unix socket; "
                    "pass a shorter base_dir"
                )
            if owner is not None:
                os.chown(base, owner.pw_uid, owner.pw_gid)
            base.chmod(0o700)
            self._initdb()
            self._start_server()
            self._running = True
            self.create_database(self.database)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its temporary directory. Idempotent."""
        atexit.unregister(self.stop)
        base = self._base
        if base is None:
            return
        if self._owner_pid is not None and self._owner_pid != os.getpid():
            # A forked child inherited this object: the server belongs to the parent.
            return
        try:
            self._stop_server()
        finally:
            shutil.rmtree(base, ignore_errors=True)
            self._base = None
            self._port = None
            self._running = False
            self._owner_pid = None

    # ------------------------------------------------------------------ databases

    def create_database(self, name: str) -> str:
        """Create an empty database ``name`` and return its SQLAlchemy URL."""
        _check_db_name(name)
        if not self._running:
            raise RuntimeError("the throwaway PostgreSQL server is not started")
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` (closing its open connections)."""
        _check_db_name(name)
        if not self._running:
            raise RuntimeError("the throwaway PostgreSQL server is not started")
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    # ------------------------------------------------------------------ internals

    def _run_as_prefix(self) -> tuple[list[str], pwd.struct_passwd | None]:
        """Command prefix that drops root privileges, and the user it drops to."""
        if os.geteuid() != 0:
            return [], None
        try:
            owner = pwd.getpwnam(self._run_as)
        except KeyError:
            raise PostgresUnavailable(
                f"running as root, but there is no {self._run_as!r} system user to run "
                f"PostgreSQL as; {ENSURE_HINT}"
            ) from None
        runuser = shutil.which("runuser")
        if runuser is not None:
            return [runuser, "-u", self._run_as, "--"], owner
        setpriv = shutil.which("setpriv")
        if setpriv is not None:
            return [
                setpriv,
                f"--reuid={owner.pw_uid}",
                f"--regid={owner.pw_gid}",
                "--init-groups",
                "--",
            ], owner
        raise PostgresUnavailable(
            "running as root, but neither runuser nor setpriv is available to drop privileges"
        )

    def _run(self, args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env["LC_ALL"] = "C"
        env.pop("PGDATA", None)
        return subprocess.run(
            [*self._prefix, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=self.base_dir,  # readable by the postgres user, unlike e.g. /root
            check=False,
        )

    def _bin(self, name: str) -> str:
        assert self._bin_dir is not None
        return str(self._bin_dir / name)

    def _initdb(self) -> None:
        result = self._run(
            [
                self._bin("initdb"),
                "--pgdata",
                str(self.data_dir),
                "--username",
                self.superuser,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            timeout=120,
        )
        if result.returncode != 0:
            hint = ""
            if self._prefix:
                hint = (
                    f"\n(running as root, so the server runs as {self._run_as!r}, which must be "
                    f"able to reach {self.base_dir}: every parent directory needs o+x)"
                )
            raise PostgresStartError(
                f"initdb failed (exit {result.returncode}):\n{result.stdout}{result.stderr}{hint}"
            )
        conf = self.data_dir / "postgresql.conf"
        self._base_conf = conf.read_text()

    def _write_conf(self, port: int) -> None:
        settings: dict[str, str | int | float | bool] = {
            "listen_addresses": "127.0.0.1",
            "port": port,
            "unix_socket_directories": str(self.socket_dir),
            **self._settings,
        }
        lines = [f"{key} = {_conf_value(value)}" for key, value in settings.items()]
        block = "\n# kiban throwaway server\n" + "\n".join(lines) + "\n"
        # Rewriting in place keeps the file's owner (the postgres user when we are root).
        (self.data_dir / "postgresql.conf").write_text(self._base_conf + block)

    def _start_server(self) -> None:
        attempts = 1 if self._requested_port is not None else 5
        for attempt in range(1, attempts + 1):
            port = self._requested_port or _free_port()
            self._port = port
            self._write_conf(port)
            result = self._run(
                [
                    self._bin("pg_ctl"),
                    "start",
                    "--pgdata",
                    str(self.data_dir),
                    "--log",
                    str(self.log_path),
                    "--wait",
                    "--timeout",
                    str(max(1, round(self._start_timeout))),
                    "--silent",
                ],
                timeout=self._start_timeout + 30,
            )
            if result.returncode == 0:
                return
            log = _tail(self.log_path)
            self._stop_server()
            if attempt < attempts and _PORT_IN_USE.search(log):
                with contextlib.suppress(OSError):
                    self.log_path.unlink()
                continue
            raise PostgresStartError(
                f"PostgreSQL failed to start on 127.0.0.1:{port} "
                f"(pg_ctl exit {result.returncode}): {result.stdout}{result.stderr}\n"
                f"--- tail of {self.log_path} ---\n{log}"
            )

    def _stop_server(self) -> None:
        """Stop whatever server runs on the data directory, harder and harder."""
        pid_file = self.data_dir / "postmaster.pid"
        if not pid_file.exists():
            return
        for mode in ("fast", "immediate"):
            try:
                result = self._run(
                    [
                        self._bin("pg_ctl"),
                        "stop",
                        "--pgdata",
                        str(self.data_dir),
                        "--mode",
                        mode,
                        "--wait",
                        "--timeout",
                        "30",
                        "--silent",
                    ],
                    timeout=60,
                )
            except subprocess.TimeoutExpired:
                continue
            if result.returncode == 0 or not pid_file.exists():
                return
        # Last resort: kill the postmaster named in postmaster.pid.
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                return
            time.sleep(0.05)


def _check_db_name(name: str) -> None:
    if not _DB_NAME.match(name):
        raise ValueError(
            f"database name {name!r} must be a plain identifier (letters, digits, _; max 63)"
        )
