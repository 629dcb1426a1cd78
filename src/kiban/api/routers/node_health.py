"""Node agents' reports and checks on demand (admin token): ``kiban.services.node_health``."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, BackgroundTasks, Response
from pydantic import BaseModel
from sqlalchemy.orm import Session

from kiban.api import responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.params import TOKEN, NodeName
from kiban.health.conditions import Condition
from kiban.health.report import (
    NodeHealthBatch,
    NodeHealthBatchReply,
    NodeHealthReply,
    NodeHealthReport,
)
from kiban.platform import Platform
from kiban.services import node_health, remediation

router = APIRouter(prefix="/api/v1", tags=["health"], dependencies=TOKEN, route_class=SessionRoute)


class CheckResult(BaseModel):
    """What ``POST /nodes/{name}/health/check`` answers: the checks the agent just ran."""

    node: str
    taken_at: float
    conditions: list[Condition]


@router.post(
    "/nodes/{name}/health", response_model=NodeHealthReply, responses=responses.ADMIN_CHANGE_JSON
)
def report_health(
    name: NodeName,
    body: NodeHealthReport,
    background: BackgroundTasks,
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
) -> Response:
    """A node agent's report: its conditions are stored and the health rules applied; the
    answer says which job holds each GPU."""
    principal.require_admin()
    ingested = node_health.ingest(session, name, body, platform.clock.now())
    session.commit()
    if ingested.worth_deciding:
        _remediate(platform, session, [name], background)
    return _json(ingested.reply)


@router.post(
    "/nodes/health",
    response_model=NodeHealthBatchReply,
    responses=responses.ADMIN_CHANGE_JSON,
)
def report_health_batch(
    body: NodeHealthBatch,
    background: BackgroundTasks,
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
) -> Response:
    """An agent's reports on several nodes, taken all or none in one transaction (a refused
    one is a 422 naming its index); the rules decide once, for the nodes they could act on;
    the answer holds each node's reply by name."""
    principal.require_admin()
    taken = node_health.ingest_batch(session, body.reports, platform.clock.now())
    session.commit()
    names = [report.reading.node for report in body.reports]
    deciding = [
        name for name, ingested in zip(names, taken, strict=True) if ingested.worth_deciding
    ]
    if deciding:
        _remediate(platform, session, deciding, background)
    replies = {name: ingested.reply for name, ingested in zip(names, taken, strict=True)}
    return _json(NodeHealthBatchReply(replies=replies))


def _json(answer: NodeHealthReply | NodeHealthBatchReply) -> Response:
    """The answer serialized once: FastAPI would dump it, validate it again against the
    response model and dump it again (the model is still what OpenAPI declares)."""
    return Response(answer.model_dump_json(), media_type="application/json")


@router.post(
    "/nodes/{name}/health/check",
    response_model=CheckResult,
    responses={**responses.ADMIN_CHANGE, 503: responses.BUSY},
)
def check_node(
    name: NodeName,
    background: BackgroundTasks,
    platform: PlatformDep,
    principal: PrincipalDep,
    session: SessionDep,
) -> CheckResult:
    """Ask the node's agent to run every check now; its report is taken as if it had posted it."""
    principal.require_admin()
    address = node_health.agent_address(session, name)
    session.commit()  # no transaction open while the agent works
    report = node_health.ask_agent(address, name)
    ingested = node_health.ingest(session, name, report, platform.clock.now())
    session.commit()
    if ingested.worth_deciding:
        _remediate(platform, session, [name], background)
    return CheckResult(
        node=name, taken_at=report.reading.taken_at, conditions=list(report.conditions)
    )


def _remediate(
    platform: Platform, session: Session, names: Sequence[str], background: BackgroundTasks
) -> None:
    done = remediation.remediate(session, platform.policy.health, names, platform.clock.now())
    if done.work:  # taints and hooks after the answer, with no transaction open
        taints = platform.executor.offers.taints
        background.add_task(
            remediation.carry_out, platform.sessions, done.work, taints, platform.clock.now
        )
    if done.drains:
        platform.loop.health.drain_recorded()  # a drain's requeues are the loop's
        platform.loop.wake()
