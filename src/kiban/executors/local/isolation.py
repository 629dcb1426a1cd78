"""Local jobs kept apart from kiban's secrets and from other tenants, when kiban runs as root.

Each replica's command runs as its tenant's user (``users``), with no other group; its shim
stays root, so that its exit code is recorded where only kiban writes. The home is laid out so
that those users reach only what is theirs::

    <home>/                   root, 0711: others may pass through, not list
        token, url, kiban.db  root, 0600 (kiban runs with umask 077: what it writes is its own)
        jobs/                 root, 0700: logs, pid and exit files, links to replicas' sockets
        checkpoints/<job>/    the tenant's user, 0700  (checkpoints/ itself root, 0711)
        work/<job>/           the tenant's user, 0700: the working directory of a job that
                              names none
        run/<job>/            the tenant's user, 0700: a service replica's Unix socket
        users/<user>/         the tenant's user, 0700: its HOME (caches), kept across jobs

Why 0711 and not a 0700 home with the tenants' directories elsewhere: one home stays one
directory (moved, backed up, removed together), and a tenant's user can open only the paths
it is given, each of them its own.

A replica's output is a pipe to its shim, which copies it into the log and notes when each part
was written beside it (``log_index``), both files kiban's in a directory only kiban enters; the
job holds neither, and the pipe is the tenant's user's (so that ``/dev/stdout`` can be opened
again). A
service replica's socket is made by the replica in its run directory and reached through a
hard link kiban makes in its own, once it has checked that the socket is that user's: the
router never follows a path a tenant could change.
"""

from __future__ import annotations

import getpass
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kiban.executors.base import LaunchError, LaunchRequest
from kiban.executors.local.users import SYSTEM_PATH, TenantUser, TenantUserError, TenantUsers

HOME_MODE = 0o711
PRIVATE_MODE = 0o700
SECRET_MODE = 0o600
SECRETS = ("token", "url", "kiban.db", "kiban.db-wal", "kiban.db-shm")
"""Files of the home only kiban may read (made so on start: a home made before may have
them readable by others)."""
AREAS = ("checkpoints", "work", "run", "users")
"""Directories of the home that hold one directory per job or user, each its tenant's."""
JOB_UMASK = 0o022
"""The umask a job starts with (kiban's own, 077, is not passed on)."""
KNOWN_REACHABLE = 4096
"""Paths remembered as reachable by a user (a launch then needs no check process)."""


def blocking_directories(path: Path) -> list[Path]:
    """Directories on the way to ``path`` (as written, and with its links resolved), and
    ``path`` itself if it is one, that other users may not search (no ``o+x``; ACLs aside):
    what keeps them from it."""
    found: list[Path] = []
    for route in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        for directory in (*reversed(route.parents), route):
            try:
                mode = directory.stat().st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH and directory not in found:
                found.append(directory)
    return found


def _mode_fix(blocked: list[Path]) -> str:
    return "chmod o+x " + " ".join(str(d) for d in blocked)


def user_can_reach(user: TenantUser, path: Path) -> bool:
    """Whether ``user`` may search the directory (or run the file) ``path``: asked of the
    system as that user (``test -x``), so ACLs and every directory on the way count."""
    program = shutil.which("test", path=SYSTEM_PATH) or "/usr/bin/test"
    try:
        done = subprocess.run(
            [program, "-x", str(path)],
            user=user.uid,
            group=user.gid,
            extra_groups=[],
            cwd="/",
            env={},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


class Isolation:
    """The users, directories and modes that keep one tenant's local jobs from the rest."""

    def __init__(self, home: Path, users: TenantUsers | None = None) -> None:
        self.home = home
        self.users = users or TenantUsers()
        self._reachable: set[tuple[int, str]] = set()
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Give the home and its areas their modes, and its secrets theirs."""
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, HOME_MODE)
        jobs = self.home / "jobs"
        jobs.mkdir(exist_ok=True)
        os.chmod(jobs, PRIVATE_MODE)
        for area in AREAS:
            (self.home / area).mkdir(exist_ok=True)
            os.chmod(self.home / area, HOME_MODE)
        for name in SECRETS:
            path = self.home / name
            if path.is_file() and not path.is_symlink():
                os.chmod(path, SECRET_MODE)

    # -- users and their directories ------------------------------------------------------------
    def user_for(self, tenant: str) -> TenantUser:
        try:
            return self.users.user_for(tenant)
        except TenantUserError as exc:
            raise LaunchError(str(exc)) from None

    def give(self, path: Path, user: TenantUser) -> Path:
        """Make ``path`` (a directory in one of kiban's own) ``user``'s, mode 0700."""
        path.mkdir(parents=True, exist_ok=True)
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise LaunchError(f"{path} is not a directory")
        os.chown(path, user.uid, user.gid, follow_symlinks=False)
        os.chmod(path, PRIVATE_MODE)
        return path

    def area(self, name: str, entry: str) -> Path:
        """``<home>/<area>/<entry>`` (a job id or a user name, checked by the caller)."""
        return self.home / name / entry

    def home_of(self, user: TenantUser) -> Path:
        """The user's HOME: its caches, kept across its tenant's jobs."""
        return self.give(self.area("users", user.name), user)

    def socket_path(self, job_id: str, attempt: int, rank: int) -> Path:
        """Where a service replica of this attempt makes its Unix socket."""
        return self.area("run", job_id) / f"attempt-{attempt}-rank-{rank}.sock"

    def link_socket(self, job_id: str, attempt: int, rank: int, link: Path) -> bool:
        """Hard-link the replica's socket to ``link`` (in kiban's own directory) when it is a
        socket of the job's user; True when ``link`` is then that socket."""
        run_dir = self.area("run", job_id)
        try:
            owner = os.lstat(run_dir).st_uid
            made = os.lstat(self.socket_path(job_id, attempt, rank))
        except OSError:
            return False
        if owner == 0 or not stat.S_ISSOCK(made.st_mode) or made.st_uid != owner:
            return False
        try:
            os.link(self.socket_path(job_id, attempt, rank), link, follow_symlinks=False)
            linked = os.lstat(link)
        except OSError:
            return False
        if not stat.S_ISSOCK(linked.st_mode) or linked.st_uid != owner:
            link.unlink(missing_ok=True)  # swapped meanwhile: not the replica's own socket
            return False
        return True

    # -- reach ----------------------------------------------------------------------------------
    def check_reach(self, user: TenantUser, path: Path, what: str) -> None:
        """LaunchError unless ``user`` may search (or run) ``path``, saying what to open."""
        key = (user.uid, str(path))
        with self._lock:
            if key in self._reachable:
                return
        if not user_can_reach(user, path):
            blocked = blocking_directories(path)
            fix = f" ({_mode_fix(blocked)})" if blocked else ""
            raise LaunchError(
                f"{what} {path} is out of reach of {user.name}, the user tenant jobs run as "
                f"here: make it and the directories above it readable and searchable by "
                f"others{fix}"
            )
        with self._lock:
            if len(self._reachable) >= KNOWN_REACHABLE:
                self._reachable.clear()
            self._reachable.add(key)


@dataclass(frozen=True)
class TenantRun:
    """One launch's replicas as their tenant's user: the directories and checks it needs."""

    isolation: Isolation
    user: TenantUser

    @classmethod
    def of(cls, isolation: Isolation, request: LaunchRequest) -> TenantRun:
        return cls(isolation, isolation.user_for(request.tenant))

    @property
    def ids(self) -> str:
        """``UID:GID``, as the shim takes them."""
        return f"{self.user.uid}:{self.user.gid}"

    def own(self, area: str, job_id: str) -> Path:
        """The job's directory in ``area`` (work, run), made the user's."""
        return self.isolation.give(self.isolation.area(area, job_id), self.user)

    def environment(self) -> dict[str, str]:
        """HOME, USER and LOGNAME of the user (not kiban's, which it may not read)."""
        home = self.isolation.home_of(self.user)
        return {"HOME": str(home), "USER": self.user.name, "LOGNAME": self.user.name}

    def check_reach(
        self, working_dir: Path, programs: Sequence[tuple[str, Path]], *, torchrun: bool
    ) -> None:
        """LaunchError unless the user can enter the working directory and run each program
        (and Python, which runs torchrun)."""
        self.isolation.check_reach(self.user, working_dir, "the working directory")
        if torchrun:
            self.isolation.check_reach(self.user, Path(sys.executable), "Python (for torchrun)")
        for name, path in programs:
            self.isolation.check_reach(self.user, path, f"the command {name!r} at")


def startup_notes(home: Path, isolated: bool) -> list[str]:
    """What ``kiban up`` says of local jobs' reach: who they run as, and what they cannot
    reach that they will need."""
    if not isolated:
        user = getpass.getuser()
        return [
            f"local jobs run as {user}, as kiban does: they can read whatever {user} can, this "
            f"home's admin token included; for several tenants run `kiban up --multi-tenant` "
            "as root (README: Isolation of local jobs)"
        ]
    notes = [
        "local jobs run as a user of their tenant's (kiban-<tenant>), apart from kiban's "
        "secrets and from other tenants"
    ]
    blocked = blocking_directories(home / "checkpoints")
    if blocked:
        notes.append(
            f"warning: those users cannot reach this home ({home}); jobs will find no "
            f"checkpoint directory: {_mode_fix(blocked)}, or choose another --home"
        )
    blocked = blocking_directories(Path(sys.executable))
    if blocked:
        notes.append(
            f"warning: those users cannot run this Python ({sys.executable}): `python` jobs, "
            f"torchrun and model servers will not start: {_mode_fix(blocked)}"
        )
    return notes
