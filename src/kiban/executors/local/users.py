"""The system user each tenant's local jobs run as, when kiban runs as root (see ``isolation``).

A tenant's user is ``kiban-<tenant>``, a system user with a group of its own, no home and no
login shell, created by kiban with ``useradd`` and marked as kiban's by its comment
(``kiban tenant <tenant>``). A name that does not fit Linux's 32 characters, or that an account
kiban did not make already holds, gives way to ``kiban-<start of tenant>-<hash of tenant>``;
kiban never runs a job as a user it did not make for that tenant.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass

USER_PREFIX = "kiban-"
MAX_USER_NAME = 32
"""Linux's limit on a user name (useradd refuses longer)."""
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]*")
"""The names useradd accepts everywhere (matched whole)."""
DIGEST_CHARS = 8
SYSTEM_PATH = os.pathsep.join(("/usr/sbin", "/sbin", "/usr/bin", "/bin"))
"""Where ``useradd`` and ``nologin`` are, whatever the server's PATH."""


class TenantUserError(Exception):
    """No user could be found or made for a tenant; the message says why."""


@dataclass(frozen=True)
class TenantUser:
    """A tenant's system user: its name and ids (its only group is its own)."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Account:
    """What the system's user database says of a name."""

    uid: int
    gid: int
    comment: str


def mark(tenant: str) -> str:
    """The comment (GECOS) that marks a user as the one kiban made for ``tenant``."""
    return f"kiban tenant {tenant}"


def candidate_names(tenant: str) -> list[str]:
    """User names for ``tenant``, first choice first: ``kiban-<tenant>`` when it is a valid
    name of at most 32 characters, then one that always is (start of the name, hash of all)."""
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:DIGEST_CHARS]
    room = MAX_USER_NAME - len(USER_PREFIX) - DIGEST_CHARS - 1
    safe = re.sub(r"[^a-z0-9-]", "", tenant.lower())[:room]
    hashed = f"{USER_PREFIX}{safe}-{digest}" if safe else f"{USER_PREFIX}{digest}"
    plain = USER_PREFIX + tenant
    if len(plain) <= MAX_USER_NAME and USER_NAME.fullmatch(plain):
        return [plain, hashed]
    return [hashed]


def system_account(name: str) -> Account | None:
    """The account ``name`` in the system's user database, or None."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(entry.pw_uid, entry.pw_gid, entry.pw_gecos)


def useradd(name: str, comment: str) -> None:
    """Create a system user ``name`` with a group of its own, no home, no login."""
    program = shutil.which("useradd", path=SYSTEM_PATH)
    if program is None:
        raise TenantUserError(
            "useradd is not installed (the passwd or shadow-utils package): kiban, running as "
            "root, runs each tenant's jobs as a user of its own and cannot make one"
        )
    shell = shutil.which("nologin", path=SYSTEM_PATH) or "/bin/false"
    command = [
        program,
        "--system",
        "--user-group",
        "--no-create-home",
        "--home-dir",
        "/nonexistent",
        "--shell",
        shell,
        "--comment",
        comment,
        name,
    ]
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            umask=0o022,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TenantUserError(f"useradd {name} failed: {exc}") from None
    if done.returncode != 0:
        detail = done.stderr.strip() or f"exit code {done.returncode}"
        raise TenantUserError(f"useradd {name} failed: {detail}")


class TenantUsers:
    """Finds, or makes, each tenant's user; remembers it once found."""

    def __init__(
        self,
        lookup: Callable[[str], Account | None] = system_account,
        create: Callable[[str, str], None] = useradd,
    ) -> None:
        self._lookup = lookup
        self._create = create
        self._known: dict[str, TenantUser] = {}
        self._lock = threading.Lock()

    def user_for(self, tenant: str) -> TenantUser:
        """The user ``tenant``'s jobs run as (made now if there is none yet)."""
        with self._lock:
            known = self._known.get(tenant)
            if known is None:
                known = self._known[tenant] = self._find_or_make(tenant)
            return known

    def _find_or_make(self, tenant: str) -> TenantUser:
        if not tenant or not tenant.isprintable() or ":" in tenant:
            raise TenantUserError(f"tenant name {tenant!r} cannot name a system user")
        wanted = mark(tenant)
        names = candidate_names(tenant)
        for name in names:
            account = self._lookup(name)
            if account is None:
                try:
                    self._create(name, wanted)
                except TenantUserError:
                    account = self._lookup(name)  # made meanwhile by another kiban?
                    if account is None:
                        raise
                else:
                    account = self._lookup(name)
                if account is None:
                    raise TenantUserError(f"user {name} was made but cannot be found")
            if account.comment == wanted and account.uid != 0:
                return TenantUser(name, account.uid, account.gid)
        raise TenantUserError(
            f"no user for tenant {tenant}: {' and '.join(names)} exist already and were not "
            f"made by kiban for it (their comment is not {wanted!r})"
        )
