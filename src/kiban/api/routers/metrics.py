"""``/metrics`` for Prometheus, and the targets of its HTTP service discovery.

Both are served without a token: they carry no tenant's data beyond names (queues, tenants,
nodes, services, the ids of jobs with idle GPUs), as Kueue's metrics do.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from kiban.api import responses
from kiban.api.deps import PlatformDep, SessionDep, SessionRoute
from kiban.observability.cluster_metrics import ClusterMetrics
from kiban.observability.discovery import TargetGroup, scrape_targets
from kiban.observability.exposition import CONTENT_TYPE
from kiban.platform import Platform

router = APIRouter(tags=["metrics"], route_class=SessionRoute)

DISCOVERY_PATH = "/api/v1/discovery/prometheus"


def cluster_metrics(platform: Platform) -> ClusterMetrics:
    """The control plane's metrics (read from the store at each scrape)."""
    return ClusterMetrics(
        platform.sessions,
        lambda: platform.policy,
        platform.clock,
        cycles=platform.loop.cycle_seconds,
        idle=platform.loop.idle_gpus,
        budgets=None if platform.loop.gates.budgets is None else platform.loop.gates.budgets.ratios,
        estimates=platform.loop.runtime_estimates,
        audit_failures=None if platform.audit is None else platform.audit.failures,
    )


@router.get(
    "/metrics",
    response_class=Response,
    responses={**responses.SERVED, 200: {"content": {CONTENT_TYPE: {}}}},
)
def metrics(platform: PlatformDep) -> Response:
    """The control plane's metrics in Prometheus's text format: queues, quotas, fair share,
    scheduling, nodes and their health, remediation, idle GPUs."""
    return Response(cluster_metrics(platform).render(), media_type=CONTENT_TYPE)


@router.get(DISCOVERY_PATH, response_model=list[TargetGroup], responses=responses.SERVED)
def discovery(request: Request, platform: PlatformDep, session: SessionDep) -> list[TargetGroup]:
    """Prometheus's ``http_sd_configs``: the control plane, node agents and model servers."""
    host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
    return scrape_targets(
        session, host, request.url.scheme, platform.services.addresses, platform.services.ports
    )
