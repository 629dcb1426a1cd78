"""Nodes: what the executor reports, the admins' cordons, and the health verdict.

A cordoned or unhealthy node takes no new work (the snapshot marks it unschedulable). A
cordon leaves running jobs alone, as ``kubectl cordon`` does. Health is a seam: the executor's
report at start and the health checks (later) call ``set_node_health``; the control loop
requeues the jobs of unhealthy nodes (``jobs_on_node`` finds them). Every change is an event of
the node (kind ``Node``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.executors.base import NodeInfo
from kiban.health.remediation import CordonSource
from kiban.scheduler import units
from kiban.scheduler.reasons import counted, cpus, extended_amount
from kiban.services import events
from kiban.services.auth import Principal
from kiban.services.errors import NotFound
from kiban.store.models import Job, Replica
from kiban.store.models_nodes import Node

MAX_NODE_NAME = 253  # the width of nodes.name


def node_name_plausible(name: str) -> bool:
    """Whether the store could hold a node called ``name``: one it cannot is not looked up
    (PostgreSQL refuses NUL characters)."""
    return 0 < len(name) <= MAX_NODE_NAME and name.isprintable()


def get_node(session: Session, name: str) -> Node:
    """The node called ``name``, or NotFound."""
    node = session.get(Node, name) if node_name_plausible(name) else None
    if node is None:
        raise NotFound(f"node {name} not found")
    return node


def gpus_in_use(session: Session) -> dict[str, int]:
    """GPUs held by active replicas, per node."""
    used: dict[str, int] = {}
    rows = session.execute(select(Replica.node, Replica.gpu_ids).where(Replica.active.is_(True)))
    for node, gpu_ids in rows.all():
        used[node] = used.get(node, 0) + len(gpu_ids or [])
    return used


def list_nodes(session: Session) -> list[Node]:
    return list(session.scalars(select(Node).order_by(Node.name)))


def sync_nodes(session: Session, nodes: Sequence[NodeInfo], at: float) -> None:
    """Make the node table match what the executor reports, keeping admins' cordons."""
    reported = {n.name: n for n in nodes}
    for stale in session.scalars(select(Node)).all():
        if stale.name not in reported:
            session.delete(stale)
            events.record(
                session,
                kind="Node",
                name=stale.name,
                reason="Removed",
                message="no longer reported by the executor",
                at=at,
            )
    for info in nodes:
        row = session.get(Node, info.name)
        if row is None:
            row = Node(
                name=info.name,
                cordoned=False,
                healthy=True,
                health_message="",
                updated_at=at,
                gpus_used_elsewhere=0,
                unschedulable_reason="",
                labels={},
            )
            session.add(row)
            events.record(
                session,
                kind="Node",
                name=info.name,
                reason="Registered",
                message=(
                    f"{counted(info.gpus, 'GPU')}, {cpus(info.cpu_millis)}, "
                    f"{units.size(info.memory)} of memory"
                    + "".join(
                        f", {extended_amount(name, amount)}"
                        for name, amount in sorted(info.extended.items())
                    )
                ),
                at=at,
            )
        row.gpus = info.gpus
        row.cpu_millis = info.cpu_millis
        row.memory = info.memory
        row.labels = dict(info.labels)
        row.gpus_used_elsewhere = info.gpus_used_elsewhere
        if dict(info.extended) != (row.extended or {}):
            row.extended = dict(info.extended)
        row.unschedulable_reason = info.unschedulable
        row.updated_at = at
        _record_health(session, row, info.healthy, info.health_message, at)


def cordon(session: Session, principal: Principal, name: str, at: float) -> Node:
    """Take a node out of scheduling: it takes no new work; running jobs keep running."""
    return _set_cordon(session, principal, name, True, at)


def uncordon(session: Session, principal: Principal, name: str, at: float) -> Node:
    """Let a cordoned node take new work again."""
    return _set_cordon(session, principal, name, False, at)


def _set_cordon(
    session: Session, principal: Principal, name: str, cordoned: bool, at: float
) -> Node:
    principal.require_admin()
    node = get_node(session, name)
    source = CordonSource.ADMIN if cordoned else CordonSource.NONE
    if node.cordoned != cordoned:  # again on a cordoned node: nothing changes, no event
        set_cordon(node, source, at)
        events.record(
            session,
            kind="Node",
            name=node.name,
            reason="Cordoned" if cordoned else "Uncordoned",
            message=(
                f"cordoned by {principal.name}: takes no new work; running jobs keep running"
                if cordoned
                else f"uncordoned by {principal.name}: takes new work again"
            ),
            at=at,
        )
    return node


def set_cordon(node: Node, source: CordonSource, at: float) -> None:
    """Cordon the node on behalf of ``source`` (an admin or the health rules), or with
    ``CordonSource.NONE`` uncordon it. The caller records the event: it knows why."""
    node.cordoned = source is not CordonSource.NONE
    node.cordon_source = source.value
    node.updated_at = at


def set_node_health(session: Session, name: str, healthy: bool, message: str, at: float) -> Node:
    """Record the health verdict of a node (NotFound for an unknown node).

    An unhealthy node takes no new work, and the control loop requeues the jobs running on it
    (see ``jobs_on_node``). A change of verdict, or of the message while unhealthy, is an event
    (a warning when the node is unhealthy); the same verdict again records nothing.
    """
    node = get_node(session, name)
    _record_health(session, node, healthy, message, at)
    return node


def _record_health(session: Session, node: Node, healthy: bool, message: str, at: float) -> None:
    message = "" if healthy else (message or "unhealthy")
    if node.healthy == healthy and (healthy or node.health_message == message):
        node.health_message = message
        return
    node.healthy = healthy
    node.health_message = message
    node.updated_at = at
    events.record(
        session,
        kind="Node",
        name=node.name,
        reason="Healthy" if healthy else "Unhealthy",
        message="healthy again: takes new work" if healthy else f"unhealthy: {message}",
        at=at,
        warning=not healthy,
    )


def jobs_on_node(session: Session, name: str) -> list[Job]:
    """Jobs with an active replica on the node, oldest first: what to requeue when it fails."""
    query = (
        select(Job)
        .where(
            Job.id.in_(select(Replica.job_id).where(Replica.node == name, Replica.active.is_(True)))
        )
        .order_by(Job.submitted_at, Job.id)
    )
    return list(session.scalars(query))
