"""Prometheus HTTP service discovery (``http_sd_configs``): what there is to scrape.

The answer is a list of target groups, ``{"targets": ["host:port"], "labels": {...}}``, the
shape Prometheus's HTTP SD documents (labels may set ``__metrics_path__`` and ``__scheme__``):

- the control plane itself, at the address the caller reached it on (``kiban_component``
  ``control-plane``);
- each node agent with an address (``node-agent``; ``node`` when the agent serves one node:
  one agent of the local executor serves all its virtual nodes, and is listed once);
- each running model server replica (``model-server``, with ``service``, ``tenant``,
  ``revision``), as the service controller last reached it. A replica reached on a Unix socket
  (``unix:...``: the local executor's, all on this machine) is listed at its TCP port on
  loopback, which kiban's model server serves beside the socket; Prometheus cannot scrape a
  socket.

Left out: the control plane's router, which serves no ``/metrics``.
Nothing here is a tenant's data beyond the names of its services.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.domain.rollout import revision_name
from kiban.store.models_nodes import Node
from kiban.store.models_serving import ServiceReplica, ServiceRevision, ServiceRow

METRICS_PATH = "/metrics"
UNIX_PREFIX = "unix:"  # the executors' Unix-socket addresses (kiban.serving.router.upstream)
CHUNK = 500


class TargetGroup(BaseModel):
    """One group of targets with the labels Prometheus attaches to their series."""

    targets: list[str]
    labels: dict[str, str]


def scrape_targets(
    session: Session,
    control_plane: str,
    scheme: str,
    replica_addresses: Mapping[str, str],
    replica_ports: Mapping[str, int],
) -> list[TargetGroup]:
    """Every target: the control plane at ``control_plane`` (host:port, as reached with
    ``scheme``), the node agents, and the replicas at ``replica_addresses`` (job id to
    address, the service controller's latest) with their TCP ports ``replica_ports``."""
    groups = [
        TargetGroup(
            targets=[control_plane],
            labels={
                "kiban_component": "control-plane",
                "__metrics_path__": METRICS_PATH,
                "__scheme__": scheme,
            },
        )
    ]
    groups += _agents(session)
    groups += _model_servers(session, _tcp_addresses(replica_addresses, replica_ports))
    return groups


def scrapable(address: str) -> bool:
    """Whether Prometheus can reach ``address`` over TCP (not empty, not a Unix socket)."""
    return bool(address) and not address.startswith(UNIX_PREFIX)


def _tcp_addresses(addresses: Mapping[str, str], ports: Mapping[str, int]) -> dict[str, str]:
    """Each replica's address for Prometheus: a Unix socket's replica at its loopback port."""
    tcp = {}
    for job, address in addresses.items():
        if address.startswith(UNIX_PREFIX) and job in ports:
            address = f"127.0.0.1:{ports[job]}"
        tcp[job] = address
    return tcp


def _agents(session: Session) -> list[TargetGroup]:
    nodes: dict[str, list[str]] = {}
    query = select(Node.agent_address, Node.name).where(Node.agent_address != "")
    for address, name in session.execute(query.order_by(Node.name)):
        if scrapable(address):
            nodes.setdefault(address, []).append(name)
    groups = []
    for address, names in sorted(nodes.items()):
        labels = {"kiban_component": "node-agent", "__metrics_path__": METRICS_PATH}
        if len(names) == 1:
            labels["node"] = names[0]
        groups.append(TargetGroup(targets=[address], labels=labels))
    return groups


def _model_servers(session: Session, addresses: Mapping[str, str]) -> list[TargetGroup]:
    reachable = {job: address for job, address in addresses.items() if scrapable(address)}
    jobs = sorted(reachable)
    groups = []
    for first in range(0, len(jobs), CHUNK):
        query = (
            select(ServiceReplica.job_id, ServiceRow.tenant, ServiceRow.name)
            .add_columns(ServiceRevision.number)
            .join(ServiceRow, ServiceRow.id == ServiceReplica.service_id)
            .join(ServiceRevision, ServiceRevision.id == ServiceReplica.revision_id)
            .where(ServiceReplica.job_id.in_(jobs[first : first + CHUNK]))
            .order_by(ServiceReplica.job_id)
        )
        for job_id, tenant, service, number in session.execute(query):
            labels = {
                "kiban_component": "model-server",
                "service": service,
                "tenant": tenant,
                "revision": revision_name(service, number),
                "__metrics_path__": METRICS_PATH,
            }
            groups.append(TargetGroup(targets=[reachable[job_id]], labels=labels))
    return groups
