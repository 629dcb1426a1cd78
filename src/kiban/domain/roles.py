"""Who a token speaks for: the roles a token may carry, from the whole cluster down to one job.

``admin`` may do everything; ``tenant-admin`` manages their own tenant (its queues within the
limits admins set, its members and tokens, the view of its budgets); ``member`` submits and
manages their own work and sees their tenant's; ``viewer`` only reads their tenant's; ``job`` is
the token of one running job (it reads that job and reports its checkpoints).
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """A token's role (``api_tokens.role``)."""

    ADMIN = "admin"
    TENANT_ADMIN = "tenant-admin"
    MEMBER = "member"
    VIEWER = "viewer"
    JOB = "job"
