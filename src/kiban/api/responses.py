"""What routes answer besides success, declared once per kind of route for the OpenAPI document.

Every error carries ``ErrorBody`` (see ``kiban.api.errors``). A route takes the table of its
kind (``responses=READ_ONE``); a route that answers something more adds an entry of its own.
``tests/api/test_fuzz_openapi.py`` fuzzes every operation with admin, member and no token and
fails on any status a route does not declare here.

Some answers come before the route is reached, and every route of their kind may give them:
``kiban up``'s HTTP server bounds every request's head and how long it takes to arrive (431,
408: ``kiban.api.http_protocol``), and admission (``kiban.api.admission``) checks the token
(401, a job's token beyond its job 403), the body's declared size (413) and the room left (503)
before the body is read.
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
    "The token's role may not do this (the message names the role it needs and the token's), "
    "for instance a viewer's change or a member's on another member's job; or a job's own token "
    "(`KIBAN_TOKEN` of its replicas) beyond reading its job, reporting its checkpoints and "
    "asking who it is."
)
ADMINS_ONLY = error(
    "The token's role may not do this: only admins (or, for their own tenant's tokens and "
    "queues, its tenant-admins); the message names the role it needs and the token's."
)
NOT_FOUND = error(
    "No such object, or one of another tenant: the two answer alike, so that nothing tells a "
    "member what other tenants have."
)
CONFLICT = error("The object's state refuses this now (the message says why).")
TOO_LARGE = error(
    "The request body is larger than the API accepts (2 MiB): refused as its `Content-Length` "
    "says so, before any of it is read, or as soon as a chunked body passes the limit."
)
HEAD_TOO_LARGE = error(
    "The request line and headers are larger than the server accepts (64 KiB); the connection "
    "is closed."
)
TOO_SLOW = error(
    "The request did not arrive in time (its line and headers within 10 s, its body within 30 s "
    "of them); the connection is closed."
)
UNREADABLE = error("The body is not JSON (or not UTF-8 text).")

SERVED: Responses = {408: TOO_SLOW, 431: HEAD_TOO_LARGE}
"""Any route of the server, ``/healthz`` included."""

SIGNED_IN: Responses = {**SERVED, 401: UNAUTHORIZED, 413: TOO_LARGE, 422: INVALID, 503: BUSY}
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

SUBMIT: Responses = {**READ, 409: CONFLICT}
"""Submitting a manifest in the body."""

ADMIN: Responses = {**SIGNED_IN, 403: ADMINS_ONLY}
"""Reading what only admins may read."""

ADMIN_CHANGE: Responses = {**ADMIN, 404: NOT_FOUND, 409: CONFLICT}
"""Changing the cluster (nodes, tenants, tokens, queues, the policy): admins only."""

ADMIN_CHANGE_JSON: Responses = {**ADMIN_CHANGE, 400: UNREADABLE}
"""Changing the cluster with a JSON body."""
