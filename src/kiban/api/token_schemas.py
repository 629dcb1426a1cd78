"""The API's shapes for tokens, and for deleting tenants and queues."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict
from pydantic.alias_generators import to_camel

from kiban.api.schemas import ApiModel
from kiban.services.draining import Deletion
from kiban.store.models import ApiToken


class TokenInfo(ApiModel):
    """A token as listed: never its secret nor the secret's hash."""

    id: int
    tenant: str | None
    member: str
    role: str
    created_at: float
    created_by: str | None
    expires_at: float | None
    last_used_at: float | None  # noted at most once a minute
    revoked_at: float | None  # None: active (unless expired)
    revoked_by: str | None


class QueueChange(ApiModel):
    """Settings of a queue to change (the rest stay); ``null`` removes one. Its tenant's
    tenant-admins may change ``strategy``, ``quota``, ``fairShareWeight`` and ``scavenger``
    within the limits admins set; ``cohort`` and the limits are the admins'."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    strategy: str | None = None
    quota: dict[str, Any] | None = None
    fair_share_weight: float | None = None
    cohort: str | None = None
    borrowing_limit: dict[str, Any] | None = None
    lending_limit: dict[str, Any] | None = None
    scavenger: bool | None = None

    def changes(self) -> dict[str, Any]:
        """The settings given (camelCase, as in the policy's ``queues``), None to remove."""
        given = self.model_dump(by_alias=True, include=self.model_fields_set)
        return dict(given)


class DeletionOut(ApiModel):
    """``deleted``; or not yet: ``stopping`` jobs still ending after ``cancelled`` were, and
    the deleted ``services`` whose replicas are still being stopped."""

    deleted: bool
    stopping: int
    cancelled: int
    services: list[str]
    message: str


def token_info(row: ApiToken) -> TokenInfo:
    return TokenInfo(
        id=row.id,
        tenant=row.tenant,
        member=row.name,
        role=row.role,
        created_at=row.created_at,
        created_by=row.created_by,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        revoked_by=row.revoked_by,
    )


def deletion_out(deletion: Deletion) -> DeletionOut:
    return DeletionOut(
        deleted=deletion.deleted,
        stopping=deletion.stopping,
        cancelled=deletion.cancelled,
        services=list(deletion.services),
        message=deletion.message,
    )
