"""What each API endpoint needs of its caller's role: the table, and the check every router
runs before its endpoint (``kiban.api.params.TOKEN``).

The check is by role only (``kiban.domain.roles.Capability``); the services then decide
which objects the caller may touch: their tenant's (others' are answered 404, as if absent),
their own jobs for a member, their tenant's queues and tokens for a tenant-admin. A route
missing from the table needs ``read`` to ``GET`` and ``admin`` for anything else, so that an
endpoint added without an entry is never open to less than an admin for a change; the role
matrix test (``tests/api/test_role_matrix.py``) fails until it has one.
"""

from __future__ import annotations

from fastapi import Request

from kiban.api.deps import get_principal
from kiban.domain.roles import Capability

READ, SUBMIT, MANAGE, ADMIN = (
    Capability.READ,
    Capability.SUBMIT,
    Capability.MANAGE_TENANT,
    Capability.ADMIN,
)
V1 = "/api/v1"

ROUTE_CAPABILITIES: dict[tuple[str, str], Capability] = {
    # jobs and arrays: members submit and manage their own (the services check whose)
    ("POST", f"{V1}/jobs"): SUBMIT,
    ("GET", f"{V1}/jobs"): READ,
    ("GET", f"{V1}/jobs/{{job_id}}"): READ,
    ("POST", f"{V1}/jobs/{{job_id}}/cancel"): SUBMIT,
    ("POST", f"{V1}/jobs/{{job_id}}/checkpoint"): SUBMIT,
    ("GET", f"{V1}/jobs/{{job_id}}/events"): READ,
    ("GET", f"{V1}/jobs/{{job_id}}/logs"): READ,
    ("GET", f"{V1}/arrays"): READ,
    ("GET", f"{V1}/arrays/{{array_id}}"): READ,
    ("POST", f"{V1}/arrays/{{array_id}}/cancel"): SUBMIT,
    # services, notebooks: their tenant's work
    ("POST", f"{V1}/services"): SUBMIT,
    ("GET", f"{V1}/services"): READ,
    ("GET", f"{V1}/services/{{name}}"): READ,
    ("POST", f"{V1}/services/{{name}}/promote"): SUBMIT,
    ("POST", f"{V1}/services/{{name}}/rollback"): SUBMIT,
    ("DELETE", f"{V1}/services/{{name}}"): SUBMIT,
    ("GET", f"{V1}/services/{{name}}/events"): READ,
    ("POST", f"{V1}/services/{{name}}/openai/{{path:path}}"): SUBMIT,  # uses the GPUs
    ("POST", f"{V1}/notebooks"): SUBMIT,
    ("GET", f"{V1}/notebooks"): READ,
    ("GET", f"{V1}/notebooks/{{name}}"): READ,
    ("POST", f"{V1}/notebooks/{{name}}/stop"): SUBMIT,
    # the caller, their tenant's view
    ("GET", f"{V1}/whoami"): READ,
    ("GET", f"{V1}/overview"): READ,
    ("GET", f"{V1}/usage/history"): READ,
    ("GET", f"{V1}/queues"): READ,
    ("GET", f"{V1}/tenants"): READ,
    ("GET", f"{V1}/policy"): READ,
    ("GET", f"{V1}/nodes"): READ,
    ("GET", f"{V1}/nodes/{{name}}/health"): READ,
    ("GET", f"{V1}/usage"): READ,  # their tenant's accounting (the service confines it)
    ("GET", f"{V1}/share"): READ,  # their tenant's members (the service confines it)
    ("GET", f"{V1}/budgets"): READ,  # their tenant's budgets (the service confines it)
    ("GET", f"{V1}/budgets/extensions"): READ,
    # a tenant's own administration (the services confine it to the caller's tenant)
    ("POST", f"{V1}/queues"): MANAGE,  # within the limits admins set (their tenant's)
    ("PATCH", f"{V1}/queues/{{name}}"): MANAGE,
    ("DELETE", f"{V1}/queues/{{name}}"): MANAGE,
    ("POST", f"{V1}/tenants/{{tenant}}/tokens"): MANAGE,
    ("GET", f"{V1}/tokens"): MANAGE,
    ("DELETE", f"{V1}/tokens/{{token_id}}"): MANAGE,
    # the cluster's
    ("POST", f"{V1}/tenants"): ADMIN,
    ("DELETE", f"{V1}/tenants/{{tenant}}"): ADMIN,
    ("PUT", f"{V1}/policy"): ADMIN,
    ("GET", f"{V1}/policy/versions"): ADMIN,
    ("POST", f"{V1}/nodes/{{name}}/cordon"): ADMIN,
    ("POST", f"{V1}/nodes/{{name}}/uncordon"): ADMIN,
    ("POST", f"{V1}/nodes/{{name}}/health"): ADMIN,
    ("POST", f"{V1}/nodes/health"): ADMIN,  # an agent's reports on several nodes
    ("POST", f"{V1}/nodes/{{name}}/health/check"): ADMIN,
    ("POST", f"{V1}/health/sweeps"): ADMIN,
    ("GET", f"{V1}/health/sweeps"): ADMIN,
    ("POST", f"{V1}/budgets/extensions"): ADMIN,
    ("GET", f"{V1}/audit"): ADMIN,
    ("GET", f"{V1}/audit/verify"): ADMIN,
    ("GET", f"{V1}/audit/anchor"): ADMIN,
}


def capability_of(method: str, path: str) -> Capability:
    """What the route ``method path`` (its template) needs (see the module's docstring)."""
    method = "GET" if method == "HEAD" else method
    found = ROUTE_CAPABILITIES.get((method, path))
    if found is not None:
        return found
    return Capability.READ if method == "GET" else Capability.ADMIN


async def check_access(request: Request) -> None:
    """Forbidden (403, naming the role needed and the caller's) unless the caller's role may
    call the matched route."""
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    if path is None:
        return
    principal = await get_principal(request)
    what = str(getattr(route, "name", path)).replace("_", " ")
    principal.require(capability_of(request.method, path), what)
