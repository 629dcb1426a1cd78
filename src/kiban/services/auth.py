"""Bearer tokens: who is calling, and what they may see. Tokens are stored as SHA-256 hashes.

Tokens are 256-bit random strings, so a fast hash is enough (as for GitHub's tokens); a slow
password hash would only cost every request time.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from kiban.domain.roles import Capability, Role, least_role, may
from kiban.services.errors import Forbidden, NotFound, Unauthorized
from kiban.store.models import ApiToken, Tenant

TOKEN_PREFIX = "kbn_"
JOB_ROLE = Role.JOB.value
"""The role of a token made for one job's replicas (``create_job_token``)."""
JOBS_PATH = "/api/v1/jobs"
WHOAMI_PATH = "/api/v1/whoami"
LAST_USE_RESOLUTION_S = 60.0
"""A token's ``last_used_at`` is written at most this often (not a write per request)."""


@dataclass(frozen=True, init=False)
class Principal:
    """The caller: who (``member``, the token's named member; ``name`` is the same for a member's
    token), of which tenant (None: an admin's token), with which ``role``; a job's token names
    its job (``job_id``: it reads that job and reports its checkpoints, see ``job_may``).

    ``Principal(name, tenant, is_admin=True)`` is the short form of an admin made in-process
    (sweeps, benches, tests); ``is_admin`` stays a property for code that only asks that.
    """

    name: str
    tenant: str | None
    role: Role
    job_id: str | None
    member: str
    token_id: int | None = field(default=None, compare=False)
    expires_at: float | None = field(default=None, compare=False)

    def __init__(
        self,
        name: str,
        tenant: str | None,
        is_admin: bool | None = None,
        job_id: str | None = None,
        *,
        role: Role | None = None,
        member: str | None = None,
        token_id: int | None = None,
        expires_at: float | None = None,
    ) -> None:
        if role is None:
            role = Role.ADMIN if is_admin else Role.JOB if job_id is not None else Role.MEMBER
        elif is_admin is not None and is_admin != (role is Role.ADMIN):
            raise ValueError(f"is_admin={is_admin} contradicts role {role}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "tenant", tenant)
        object.__setattr__(self, "role", role)
        object.__setattr__(self, "job_id", job_id)
        object.__setattr__(self, "member", name if member is None else member)
        object.__setattr__(self, "token_id", token_id)
        object.__setattr__(self, "expires_at", expires_at)

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def can_see(self, tenant: str | None) -> bool:
        return self.is_admin or (tenant is not None and tenant == self.tenant)

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def job_may(self, method: str, path: str) -> bool:
        """Whether this job's token may make this API call: read its own job (its state,
        events, logs), report its own checkpoints, and ask who it is; nothing else."""
        own = f"{JOBS_PATH}/{self.job_id}"
        if path == own or path.startswith(own + "/"):
            return method == "GET" or path == f"{own}/checkpoint"
        return method == "GET" and path == WHOAMI_PATH

    def describe(self) -> str:
        """``viewer bob of vision``: how a refusal names the caller."""
        where = f" of {self.tenant}" if self.tenant else ""
        return f"{self.role.value} {self.member}{where}"

    def require(self, capability: Capability, what: str) -> None:
        """Forbidden unless the role has ``capability``; the refusal says what ``what`` (an
        action, ``cancelling jobs``) needs and what this token is."""
        if not may(self.role, capability):
            needed = least_role(capability)
            above = "" if needed is Role.ADMIN else " or above"
            raise Forbidden(
                f"{what} needs the {needed.value} role{above}; this token is {self.describe()}"
            )

    def require_admin(self) -> None:
        if not self.is_admin:
            raise Forbidden(f"this needs an admin token; this token is {self.describe()}")

    def require_own(self, submitted_by: str | None, what: str) -> None:
        """Forbidden when a member acts on work another member submitted (their tenant's
        tenant-admins and the admins may; a job's token is confined to its own job)."""
        if self.role is Role.MEMBER and submitted_by != self.member:
            raise Forbidden(
                f"{what} needs being its submitter or the tenant-admin role (it was submitted "
                f"by {submitted_by or 'nobody known'}); this token is {self.describe()}"
            )

    def require_tenant_admin(self, tenant: str, what: str) -> None:
        """Forbidden unless an admin, or a tenant-admin of ``tenant``."""
        self.require(Capability.MANAGE_TENANT, what)
        if not self.is_admin and self.tenant != tenant:
            raise Forbidden(
                f"{what} of tenant {tenant} needs an admin token or a tenant-admin of {tenant}; "
                f"this token is {self.describe()}"
            )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


MAX_TOKEN_CHARS = 512
"""Longer is no token of ours (``new_token`` makes 47 characters): refused unread."""


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer ...`` header, or Unauthorized (no store read)."""
    if not authorization:
        raise Unauthorized("missing token: send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
    if len(token) > MAX_TOKEN_CHARS:
        raise Unauthorized("invalid token")
    return token.strip()


def authenticate(
    session: Session, authorization: str | None, now: float | None = None
) -> Principal:
    """The principal behind an ``Authorization: Bearer ...`` header, or Unauthorized (also
    for a revoked or an expired token). ``now``: the time, to check expiry and note the token's
    last use (at most once a ``LAST_USE_RESOLUTION_S``; the caller commits); None: neither."""
    token = bearer_token(authorization)
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token)))
    if row is None:
        raise Unauthorized("invalid token")
    if row.revoked_at is not None:
        raise Unauthorized(f"token {row.id} ({row.name}) was revoked; ask for a new one")
    if now is not None:
        if row.expires_at is not None and now >= row.expires_at:
            raise Unauthorized(f"token {row.id} ({row.name}) expired; ask for a new one")
        if row.last_used_at is None or now - row.last_used_at >= LAST_USE_RESOLUTION_S:
            session.execute(update(ApiToken).where(ApiToken.id == row.id).values(last_used_at=now))
    return principal_of(row)


def principal_of(row: ApiToken) -> Principal:
    return Principal(
        name=row.name,
        tenant=row.tenant,
        role=Role(row.role),
        job_id=row.job_id,
        member=row.name,
        token_id=row.id,
        expires_at=row.expires_at,
    )


def create_token(
    session: Session,
    *,
    name: str,
    tenant: str | None,
    admin: bool = False,
    at: float,
    role: Role | None = None,
    expires_at: float | None = None,
    created_by: str | None = None,
) -> str:
    """Create a token and return it in clear (the only time it is seen). ``role``: the token's
    role (default: admin when ``admin``, else member)."""
    if tenant is not None and session.get(Tenant, tenant) is None:
        raise NotFound(f"tenant {tenant} not found")
    token = new_token()
    session.add(
        ApiToken(
            token_hash=hash_token(token),
            name=name,
            role=(role or (Role.ADMIN if admin else Role.MEMBER)).value,
            tenant=tenant,
            created_at=at,
            expires_at=expires_at,
            created_by=created_by,
        )
    )
    return token


def create_job_token(session: Session, *, job_id: str, tenant: str, at: float) -> str:
    """A token for one job's replicas, in clear; the job's earlier tokens are revoked."""
    revoke_job_tokens(session, job_id)
    token = new_token()
    session.add(
        ApiToken(
            token_hash=hash_token(token),
            name=f"job {job_id}",
            role=JOB_ROLE,
            tenant=tenant,
            created_at=at,
            job_id=job_id,
        )
    )
    return token


def revoke_job_tokens(session: Session, job_id: str) -> None:
    session.execute(delete(ApiToken).where(ApiToken.job_id == job_id))


def ensure_admin_token(session: Session, token_file: Path | None, at: float) -> str | None:
    """On first start, create an admin token and write it to ``token_file`` with mode 0600
    (with no file: only when the store has no admin token yet, for the caller to show once).

    Returns the new token, or None when an admin token already exists and the file is kept.
    """
    existing = session.scalar(
        select(ApiToken)
        .where(ApiToken.role == Role.ADMIN.value, ApiToken.revoked_at.is_(None))
        .limit(1)
    )
    if token_file is None:
        if existing is not None:
            return None
        return create_token(session, name="admin", tenant=None, admin=True, at=at)
    if existing is not None and token_file.exists():
        return None
    token = create_token(session, name="admin", tenant=None, admin=True, at=at)
    token_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    os.chmod(token_file, 0o600)
    return token
