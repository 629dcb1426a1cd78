"""Allreduce sweeps: start one now, read the latest figures per block and node (admins)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from kiban.api import responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN
from kiban.services import health_sweeps
from kiban.services.health_sweeps import SweepSettings

MAX_SIZE_MB = 16_384.0  # 16 GB: more than any GPU's memory would hold twice over
MAX_ITERS = 10_000

router = APIRouter(prefix="/api/v1", tags=["health"], dependencies=TOKEN, route_class=SessionRoute)


class SkippedOut(BaseModel):
    block: list[str]
    name: str
    why: str


class SweepStarted(BaseModel):
    jobs: list[str]
    blocks: list[list[str]]
    skipped: list[SkippedOut]


class SweepFigure(BaseModel):
    """A block's or node's latest busbw (GB/s) against its baseline (median of past sweeps)."""

    name: str
    nodes: list[str]
    job: str
    busbw: float
    baseline: float
    fraction: float
    degraded: bool
    at: float


class SweepResults(BaseModel):
    blocks: list[SweepFigure]
    nodes: list[SweepFigure]


@router.post(
    "/health/sweeps", status_code=201, response_model=SweepStarted, responses=responses.ADMIN_CHANGE
)
def start_sweep(
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
    size_mb: Annotated[
        float | None,
        Query(alias="sizeMb", gt=0, le=MAX_SIZE_MB, description="the all_reduce tensor, in MB"),
    ] = None,
    iters: Annotated[int | None, Query(ge=1, le=MAX_ITERS, description="timed all_reduces")] = None,
) -> SweepStarted:
    """Start an allreduce sweep now: one lowest-priority job per topology block of idle nodes
    (``sizeMb`` and ``iters``: this sweep's, else the platform's settings)."""
    settings = platform.sweeps.settings if platform.sweeps is not None else SweepSettings()
    if size_mb is not None:
        settings = dataclasses.replace(settings, size_mb=size_mb)
    if iters is not None:
        settings = dataclasses.replace(settings, iters=iters)
    started = health_sweeps.start_sweep(
        session, principal, platform.facts, settings, platform.clock.now()
    )
    session.commit()
    platform.policy_changed()  # the sweep queue may be new; wakes the loop too
    return SweepStarted.model_validate(started.as_json())


@router.get("/health/sweeps", response_model=SweepResults, responses=responses.ADMIN_CHANGE)
def sweep_results(principal: PrincipalDep, session: SessionDep) -> SweepResults:
    """The latest figures of every block and node measured by a sweep."""
    principal.require_admin()
    return SweepResults.model_validate(health_sweeps.latest_results(session))
