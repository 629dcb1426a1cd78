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


class Capability(StrEnum):
    """What an API call needs, from reading a tenant's things up to administering the cluster.

    Every endpoint needs one (``kiban.api.access``); the services then check which objects
    (their tenant's, their own jobs) the caller may touch.
    """

    READ = "read"
    """read their tenant's jobs, queues, services, usage (and the cluster's nodes)"""
    SUBMIT = "submit"
    """submit work and manage their own (cancel, checkpoint, services, notebooks)"""
    MANAGE_TENANT = "manage-tenant"
    """their tenant's queues (within the limits admins set), members' tokens, budgets' view"""
    ADMIN = "admin"
    """the cluster: tenants, policy and quotas, nodes, every tenant's things"""


CAPABILITIES: dict[Role, frozenset[Capability]] = {
    Role.ADMIN: frozenset(Capability),
    Role.TENANT_ADMIN: frozenset({Capability.READ, Capability.SUBMIT, Capability.MANAGE_TENANT}),
    Role.MEMBER: frozenset({Capability.READ, Capability.SUBMIT}),
    Role.VIEWER: frozenset({Capability.READ}),
    # a job's token reads its own job and reports its checkpoints (the API confines it to them)
    Role.JOB: frozenset({Capability.READ, Capability.SUBMIT}),
}

GRANTABLE_BY_TENANT_ADMIN = frozenset({Role.MEMBER, Role.VIEWER})
"""The roles a tenant-admin may give their tenant's tokens (never their own or an admin's)."""

TOKEN_ROLES = (Role.ADMIN, Role.TENANT_ADMIN, Role.MEMBER, Role.VIEWER)
"""The roles a token made with ``kiban admin create-token`` may have (``job`` is made for a
job's replicas by the platform)."""


def may(role: Role, capability: Capability) -> bool:
    """Whether ``role`` has ``capability``."""
    return capability in CAPABILITIES[role]


def least_role(capability: Capability) -> Role:
    """The least role that has ``capability`` (what a refusal names as needed)."""
    for role in (Role.VIEWER, Role.MEMBER, Role.TENANT_ADMIN, Role.ADMIN):
        if may(role, capability):
            return role
    return Role.ADMIN
