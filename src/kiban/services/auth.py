"""Bearer tokens: who is calling, and what they may see. Tokens are stored as SHA-256 hashes.

Tokens are 256-bit random strings, so a fast hash is enough (as for GitHub's tokens); a slow
password hash would only cost every request time.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from kiban.services.errors import Forbidden, NotFound, Unauthorized
from kiban.store.models import ApiToken, Tenant

TOKEN_PREFIX = "kbn_"
JOB_ROLE = "job"
"""The role of a token made for one job's replicas (``create_job_token``)."""
JOBS_PATH = "/api/v1/jobs"
WHOAMI_PATH = "/api/v1/whoami"


@dataclass(frozen=True)
class Principal:
    """The caller: an admin (sees everything), a member of one tenant, or one running job
    (``job_id``: its token reads that job and reports its checkpoints, see ``job_may``)."""

    name: str
    tenant: str | None
    is_admin: bool
    job_id: str | None = None

    def can_see(self, tenant: str | None) -> bool:
        return self.is_admin or (tenant is not None and tenant == self.tenant)

    def job_may(self, method: str, path: str) -> bool:
        """Whether this job's token may make this API call: read its own job (its state,
        events, logs), report its own checkpoints, and ask who it is; nothing else."""
        own = f"{JOBS_PATH}/{self.job_id}"
        if path == own or path.startswith(own + "/"):
            return method == "GET" or path == f"{own}/checkpoint"
        return method == "GET" and path == WHOAMI_PATH

    def require_admin(self) -> None:
        if not self.is_admin:
            raise Forbidden("this needs an admin token")


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


def authenticate(session: Session, authorization: str | None) -> Principal:
    """The principal behind an ``Authorization: Bearer ...`` header, or Unauthorized."""
    token = bearer_token(authorization)
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token)))
    if row is None:
        raise Unauthorized("invalid token")
    return Principal(
        name=row.name, tenant=row.tenant, is_admin=row.role == "admin", job_id=row.job_id
    )


def create_token(session: Session, *, name: str, tenant: str | None, admin: bool, at: float) -> str:
    """Create a token and return it in clear (the only time it is seen)."""
    if tenant is not None and session.get(Tenant, tenant) is None:
        raise NotFound(f"tenant {tenant} not found")
    token = new_token()
    session.add(
        ApiToken(
            token_hash=hash_token(token),
            name=name,
            role="admin" if admin else "member",
            tenant=tenant,
            created_at=at,
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
    existing = session.scalar(select(ApiToken).where(ApiToken.role == "admin").limit(1))
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
