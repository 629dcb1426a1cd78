"""Parameters as the OpenAPI document describes them: the bearer token, and the names and ids in
paths and filters with the patterns the services accept.

A path names an object; one whose id or name does not match its pattern cannot exist, and is
answered 404 like any other missing object (the services check, not FastAPI: a 422 there would
tell a malformed id from a hidden one). Filters are checked by FastAPI against their pattern.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Query, Security
from fastapi.security import HTTPBearer

from kiban.api.access import check_access
from kiban.domain.jobspec import DNS_LABEL

JOB_ID = r"^[a-z0-9][-a-z0-9]{0,79}$"
"""What ``kiban.services.jobs.new_job_id`` makes: the job's name and a random suffix (an
array's index: its array's id and the index)."""
ARRAY_FILTER = r"^([a-z0-9][-a-z0-9]{0,79})?$"
"""A filter by array id: an id, or empty for none."""
NAME = r"^[a-z0-9][-a-z0-9]{0,62}$"
"""A job's, queue's, tenant's or service's name as lookups and filters take it."""
FILTER = r"^([a-z0-9][-a-z0-9]{0,62})?$"
"""A filter by name: a name, or empty for none."""

BEARER = HTTPBearer(
    auto_error=False,  # the services answer a missing token (401 with WWW-Authenticate)
    scheme_name="bearer",
    description="An admin's or member's token (`kiban token`), or a job's own `KIBAN_TOKEN`.",
)
TOKEN: list[Any] = [Security(BEARER), Depends(check_access)]
"""A router's ``dependencies``: declares the bearer token in the OpenAPI document, and checks
that the caller's role may call the route (``kiban.api.access``)."""


def _documented(pattern: str) -> dict[str, Any]:
    return {"pattern": pattern}


JobId = Annotated[
    str,
    Path(description="the job's id (`train-x7k2p9`)", json_schema_extra=_documented(JOB_ID)),
]
ServiceName = Annotated[
    str, Path(description="the service's name", json_schema_extra=_documented(NAME))
]
TenantName = Annotated[
    str, Path(description="the tenant's name", json_schema_extra=_documented(DNS_LABEL.pattern))
]
NodeName = Annotated[str, Path(description="the node's name, as its executor reports it")]
NameFilter = Annotated[
    str | None,
    Query(pattern=FILTER, description="only these (a name; empty: no filter)"),
]
ArrayFilter = Annotated[
    str | None,
    Query(pattern=ARRAY_FILTER, description="only the indices of this array (its id)"),
]
