"""Jobs: submit, list, get, cancel, checkpoint, events, logs (with follow streaming)."""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import TypeAdapter
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from kiban.api import request_bodies, responses
from kiban.api.array_schemas import array_out
from kiban.api.audit_trail import audit_draft
from kiban.api.deps import (
    PRINCIPAL_STATE,
    PlatformDep,
    PrincipalDep,
    SessionDep,
    SessionRoute,
)
from kiban.api.params import TOKEN, ArrayFilter, JobId, NameFilter
from kiban.api.schemas import EventOut, JobOut, event_out, job_out
from kiban.domain.states import JobState
from kiban.executors.base import job_limits
from kiban.platform import Platform
from kiban.scheduler.reasons import ReasonCode
from kiban.services import (
    events,
    job_arrays,
    job_intake,
    job_listing,
    jobs,
    logs,
    queue_status,
    runtime_estimates,
)
from kiban.services.auth import JOBS_PATH, Principal
from kiban.services.errors import invalid
from kiban.services.job_intake import SubmissionBody, SubmissionContext

router = APIRouter(prefix=JOBS_PATH, tags=["jobs"], dependencies=TOKEN, route_class=SessionRoute)

CREATED = 201
"""A stored submission's answer (and the status its audit record gives)."""

MAX_EVENT_ID = 2**31 - 1  # events.id is an INTEGER column
MAX_OFFSET = 2**63 - 1  # a file offset
MAX_TAIL = 10_000_000
MAX_SINCE_S = 1e11  # seconds: any time people mean


@router.post(
    "",
    status_code=201,
    response_model=JobOut,
    responses={
        **responses.SUBMIT,
        404: responses.error("A job or array of `spec.dependsOn` is not one the caller may see."),
        201: {
            "description": "the job; for a manifest with `spec.array`, the array (`ArrayOut`: "
            '`kind` is `"JobArray"`) whose indices are the jobs `<id>-<index>`',
        },
    },
    openapi_extra=request_bodies.JOB_MANIFEST,
)
async def submit_job(request: Request) -> Response:
    """Submit a job manifest (JSON, or YAML with ``Content-Type: application/yaml``).

    The caller was authenticated before the body was read (``kiban.api.admission``). When the
    caller's queue is in the lookup cache and the body is a small JSON document, the checks run
    right here; otherwise on a worker thread (they read the store). The write joins the group
    commit of submissions, which tells the control loop of the job. An array (``spec.array``)
    is written in a transaction of its own, every index at once.

    The platform and the caller are read from the request, not declared as dependencies:
    FastAPI solves each dependency for every request, and this is the busiest route (the
    router's ``check_access`` has refused a request with no caller already).
    """
    platform: Platform = request.app.state.platform
    principal: Principal = getattr(request.state, PRINCIPAL_STATE)
    body = SubmissionBody(await request.body(), request.headers.get("content-type", ""))
    context = SubmissionContext(
        facts=platform.facts,
        policy=platform.policy,
        at=platform.clock.now(),
        lookups=platform.lookups,
        max_array_size=platform.max_array_size,
    )
    prepared = job_intake.prepare_cached(body, principal, context)
    if prepared is None:
        prepared = await run_in_threadpool(
            job_intake.prepare_with_store, body, principal, context, platform.sessions
        )
    if prepared.relations is not None and prepared.relations.indices:
        stored = await run_in_threadpool(job_arrays.store_array, platform.sessions, prepared)
        platform.loop.wake()
        array = array_out(stored.array)
        array.warnings = list(stored.warnings)
        return Response(
            array.model_dump_json(by_alias=True), status_code=201, media_type="application/json"
        )
    along = job_arrays.hold_for_dependencies(prepared)
    draft = audit_draft(request.state)
    audited = None if draft is None else functools.partial(draft.entry, CREATED)
    await platform.submissions.stored(prepared.job, *prepared.events, along=along, audited=audited)
    if draft is not None:
        draft.written_with = CREATED  # the middleware adds no second record
    out = job_out(job_listing.as_listed(prepared.job))
    out.warnings = list(prepared.warnings)
    answer = out.model_dump_json(by_alias=True)
    return Response(answer, status_code=CREATED, media_type="application/json")


def _standings(platform: Platform, session: Session) -> dict[str, float]:
    """Each tenant's fair-share standing now (a caller is shown only its own jobs' tenants)."""
    shares = queue_status.tenant_shares(session, platform.policy, platform.clock.now())
    return {tenant: share.standing for tenant, share in shares.items()}


TOTAL_COUNT = "X-Total-Count"
JOB_PAGE = TypeAdapter(list[JobOut])
"""A page of jobs as ``response_model=list[JobOut]`` writes it (made once: building one is slow)."""


@router.get(
    "",
    response_model=list[JobOut],
    responses={
        **responses.READ,
        200: {
            "description": "the page of jobs, newest first",
            "headers": {
                TOTAL_COUNT: {
                    "description": "how many jobs match the filters, on all pages",
                    "schema": {"type": "integer"},
                }
            },
        },
    },
)
def list_jobs(
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
    state: Annotated[
        list[JobState] | None, Query(description="only jobs in these states (repeatable)")
    ] = None,
    queue: NameFilter = None,
    tenant: NameFilter = None,
    name: NameFilter = None,
    submitted_by: Annotated[
        str | None,
        Query(
            alias="submittedBy",
            max_length=63,
            description="only jobs submitted with the token of this name",
        ),
    ] = None,
    reason: Annotated[
        ReasonCode | None, Query(description="only waiting jobs with this reason")
    ] = None,
    array: ArrayFilter = None,
    array_indices: Annotated[
        bool,
        Query(
            alias="arrayIndices",
            description="false: leave arrays' indices out (list arrays at /api/v1/arrays)",
        ),
    ] = True,
    offset: Annotated[
        int,
        Query(ge=0, le=job_listing.MAX_LIST_OFFSET, description="skip this many (newest first)"),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """Jobs the caller may see, newest first, a page of them; a member's are its tenant's
    whatever ``tenant`` says. ``X-Total-Count`` says how many match on all pages.

    The answer is serialized here, on the worker thread, as ``response_model`` would
    (camelCase): not validated again and written on the event loop."""
    where = job_listing.job_filters(
        principal,
        states=[s.value for s in state or ()],
        queue=queue,
        tenant=tenant,
        name=name,
        submitted_by=submitted_by,
        reason=None if reason is None else reason.value,
        array=array,
        array_indices=array_indices,
    )
    rows = job_listing.list_page(session, where, offset=offset, limit=limit)
    total = job_listing.count_jobs(session, where)
    standing = _standings(platform, session) if rows else {}
    page = [job_out(j, standing=standing.get(j.tenant)) for j in rows]
    return Response(
        JOB_PAGE.dump_json(page, by_alias=True),
        media_type="application/json",
        headers={TOTAL_COUNT: str(total)},
    )


@router.get("/{job_id}", response_model=JobOut, responses=responses.READ_ONE)
def get_job(
    job_id: JobId, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> JobOut:
    job = jobs.get_visible(session, principal, job_id)
    standing = _standings(platform, session).get(job.tenant)
    estimate = runtime_estimates.estimate_for_job(platform.loop.runtime_estimates, session, job)
    return job_out(
        job,
        jobs.replicas_of(session, job),
        with_spec=True,
        standing=standing,
        estimate=estimate,
        executor_limits=job_limits(platform.executor),
    )


@router.post("/{job_id}/cancel", response_model=JobOut, responses=responses.CHANGE_ONE)
def cancel_job(
    job_id: JobId, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> JobOut:
    job = jobs.cancel(session, principal, job_id, platform.clock.now())
    session.commit()
    platform.loop.wake()
    return job_out(job)


@router.post("/{job_id}/checkpoint", response_model=JobOut, responses=responses.CHANGE_ONE)
def checkpoint_job(
    job_id: JobId, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> JobOut:
    """A running job reports that it saved a checkpoint now (409 if it is not running)."""
    job = jobs.report_checkpoint(session, principal, job_id, platform.clock.now())
    session.commit()
    return job_out(job)


@router.get("/{job_id}/events", response_model=list[EventOut], responses=responses.READ_ONE)
def job_events(
    job_id: JobId,
    principal: PrincipalDep,
    session: SessionDep,
    after: Annotated[int, Query(ge=0, le=MAX_EVENT_ID)] = 0,
) -> list[EventOut]:
    job = jobs.get_visible(session, principal, job_id)
    return [event_out(e) for e in events.for_object(session, "Job", job.id, after_id=after)]


@router.get(
    "/{job_id}/logs",
    response_class=StreamingResponse,
    responses={
        **responses.READ_ONE,
        200: {
            "description": "the replica's output as it wrote it (bytes), from where the query "
            "says on; with `all_ranks`, each line after `[rank R] `; with `timestamps`, each "
            "line after its time and a space",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
    },
)
async def job_logs(
    job_id: JobId,
    request: Request,
    platform: PlatformDep,
    principal: PrincipalDep,
    rank: Annotated[
        int, Query(ge=0, le=100000, description="the replica's rank (0 to its replicas - 1)")
    ] = 0,
    all_ranks: Annotated[
        bool,
        Query(
            description="every rank's lines, each after `[rank R] ` (in rank order; with "
            "`follow`, as they come); not with `offset`"
        ),
    ] = False,
    follow: Annotated[
        bool, Query(description="stream what is written until the job has ended")
    ] = False,
    offset: Annotated[
        int, Query(ge=0, le=MAX_OFFSET, description="from this byte of the rank's log on")
    ] = 0,
    tail: Annotated[
        int | None, Query(ge=0, le=MAX_TAIL, description="only its last lines, this many")
    ] = None,
    since_seconds: Annotated[
        float | None,
        Query(
            ge=0,
            le=MAX_SINCE_S,
            description="only the lines written in the last this many seconds (not with "
            "`since_time`; 422 where the executor does not know when a log was written)",
        ),
    ] = None,
    since_time: Annotated[
        float | None,
        Query(
            ge=0,
            le=MAX_SINCE_S,
            description="only the lines written since this time, in seconds since the Unix "
            "epoch (not with `since_seconds`; 422 as for it)",
        ),
    ] = None,
    timestamps: Annotated[
        bool,
        Query(
            description="each line after the time it was written (RFC 3339, UTC), as "
            "`kubectl logs --timestamps`"
        ),
    ] = False,
) -> StreamingResponse:
    """A replica's output (or every replica's); with ``follow`` it streams until the job has
    finished. ``tail`` and a ``since`` together: the last lines of those written since."""
    if since_seconds is not None and since_time is not None:
        raise invalid("since_time", "give since_seconds or since_time, not both")
    query = logs.LogQuery(
        rank=rank,
        all_ranks=all_ranks,
        follow=follow,
        offset=offset,
        tail_lines=tail,
        since_seconds=since_seconds,
        since_time=since_time,
        timestamps=timestamps,
    )
    stopping: asyncio.Event = request.app.state.stopping
    chunks = await logs.open_logs(platform, principal, job_id, query, stopping)
    return StreamingResponse(chunks, media_type="text/plain; charset=utf-8")
