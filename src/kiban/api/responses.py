"""What routes answer besides success, declared once per kind of route for the OpenAPI document.

Every error carries ``ErrorBody`` (see ``kiban.api.errors``). A route takes the table of its
kind (``responses=READ_ONE``); a route that answers something more adds an entry of its own.
``tests/api/test_fuzz_openapi.py`` fuzzes every operation with admin, member and no token and
fails on any status a route does not declare here.
"""

from __future__ import annotations

from typing import Any

from kiban.api.schemas import ErrorBody

Responses = dict[int | str, dict[str, Any]]


def error(description: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """An error answer: its description, ``ErrorBody``, and the headers it always carries."""
    declared: dict[str, Any] = {"model": ErrorBody, "description": description}
    if headers:
        declared["headers"] = {
            name: {"description": text, "required": True, "schema": {"type": "string"}}
            for name, text in headers.items()
        }
    return declared


UNAUTHORIZED = error(
    "No token, or not a valid one: send `Authorization: Bearer <token>`.",
    {"WWW-Authenticate": "`Bearer`: how to authenticate"},
)
INVALID = error(
    "A parameter or the body is not acceptable; `problems` names each field and what was wrong."
)
BUSY = error(
    "The API is at its capacity (or the caller at its share of it): try again after "
    "`Retry-After` seconds.",
    {"Retry-After": "seconds to wait before trying again"},
)
JOB_TOKEN_BEYOND_ITS_JOB = error(
    "A job's own token (`KIBAN_TOKEN` of its replicas) may only read its job, report its "
    "checkpoints and ask who it is."
)
ADMINS_ONLY = error(
    "Only admins may do this (a member's token), or a job's own token beyond its job."
)
NOT_FOUND = error(
    "No such object, or one of another tenant: the two answer alike, so that nothing tells a "
    "member what other tenants have."
)
CONFLICT = error("The object's state refuses this now (the message says why).")
TOO_LARGE = error("The request body is larger than the API accepts.")
UNREADABLE = error("The body is not JSON (or not UTF-8 text).")

SIGNED_IN: Responses = {401: UNAUTHORIZED, 422: INVALID, 503: BUSY}
"""Any route that needs a token (a job's token included)."""

READ: Responses = {**SIGNED_IN, 403: JOB_TOKEN_BEYOND_ITS_JOB}
"""Reading lists: members see their tenant's part, admins everything."""

READ_ONE: Responses = {**READ, 404: NOT_FOUND}
"""Reading one object named in the path."""

CHANGE_ONE: Responses = {**READ_ONE, 409: CONFLICT}
"""Acting on one object named in the path: it may be in a state that refuses it."""

ONE_SERVICE: Responses = {
    **READ_ONE,
    409: error("Several tenants have a service of that name: an admin names the tenant."),
}
"""Reading one service by name (names are unique per tenant, not across tenants)."""

SUBMIT: Responses = {**READ, 409: CONFLICT, 413: TOO_LARGE}
"""Submitting a manifest in the body."""

ADMIN: Responses = {**SIGNED_IN, 403: ADMINS_ONLY}
"""Reading what only admins may read."""

ADMIN_CHANGE: Responses = {**ADMIN, 404: NOT_FOUND, 409: CONFLICT}
"""Changing the cluster (nodes, tenants, tokens, queues, the policy): admins only."""

ADMIN_CHANGE_JSON: Responses = {**ADMIN_CHANGE, 400: UNREADABLE, 413: TOO_LARGE}
"""Changing the cluster with a JSON body."""
