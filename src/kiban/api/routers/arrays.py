"""Job arrays: list, read (counts by state, indices), cancel. An array is submitted as a job
manifest with ``spec.array`` (``POST /api/v1/jobs``); its indices are jobs, ``<id>-<index>``
(``GET /api/v1/jobs?array=ID`` lists them). The logic is ``kiban.services.job_arrays``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from kiban.api import responses
from kiban.api.array_schemas import ArrayOut, array_out, status_out
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN, JobId
from kiban.services import job_arrays

router = APIRouter(
    prefix="/api/v1/arrays", tags=["jobs"], dependencies=TOKEN, route_class=SessionRoute
)


@router.get("", response_model=list[ArrayOut], responses=responses.READ)
def list_arrays(
    principal: PrincipalDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[ArrayOut]:
    """The arrays the caller may see, newest first, with their indices counted by state."""
    return [array_out(a, c) for a, c in job_arrays.list_visible(session, principal, limit)]


@router.get("/{array_id}", response_model=ArrayOut, responses=responses.READ_ONE)
def get_array(
    array_id: JobId,
    principal: PrincipalDep,
    session: SessionDep,
    indices: Annotated[
        bool, Query(description="also which indices are in each state (as ranges)")
    ] = False,
) -> ArrayOut:
    array = job_arrays.get_visible(session, principal, array_id)
    return status_out(job_arrays.status(session, array, with_indices=indices))


@router.post("/{array_id}/cancel", response_model=ArrayOut, responses=responses.CHANGE_ONE)
def cancel_array(
    array_id: JobId, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> ArrayOut:
    """End every index not ended yet: pending ones at once, running ones after their grace
    period (409 when all have ended)."""
    status = job_arrays.cancel(session, principal, array_id, platform.clock.now())
    session.commit()
    platform.loop.wake()
    return status_out(status)
