"""The store side of idle GPUs: the control loop hands each scheduling pass's running jobs
here; every ``every_s`` their nodes' latest readings are read, judged (``idle_gpus``), and a
``GpusIdle`` warning is recorded on each job that has just become idle.

The spells are kept in this process (the store keeps only each node's latest reading), so after
a restart of the control plane an idle job is found again one window later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.event_reasons import JobEventReason
from kiban.observability.idle_gpus import HeldJob, IdleJob, IdleState, NodeUse, judge_idle
from kiban.scheduler.reasons import counted
from kiban.scheduler.snapshot import RunningJob
from kiban.services import events
from kiban.store.models_nodes import NodeReadingRow

CHUNK = 500  # nodes per query of readings


class IdleGpuTracker:
    """The idle spells of running jobs' GPUs, and the jobs idle now (read by ``/metrics``)."""

    def __init__(self, every_s: float = 15.0) -> None:
        self.every_s = every_s
        self.state = IdleState()
        self.idle: tuple[IdleJob, ...] = ()
        self._last = float("-inf")

    def observe(
        self,
        sessions: sessionmaker[Session],
        running: Iterable[RunningJob],
        policy: ClusterPolicy,
        now: float,
    ) -> None:
        """Judge the running jobs' GPUs again if ``every_s`` has passed since the last time."""
        if now - self._last < self.every_s:
            return
        self._last = now
        held = [
            HeldJob(
                job.id,
                job.tenant,
                job.queue,
                job.started_at,
                tuple((r.node, gpu) for r in job.replicas for gpu in r.gpu_ids),
            )
            for job in running
            if not job.stopping and any(r.gpu_ids for r in job.replicas)
        ]
        nodes = sorted({node for job in held for node, _ in job.gpus})
        with sessions() as session:
            use = read_use(session, nodes)
        settings = policy.idle_gpus
        verdict = judge_idle(
            held,
            use,
            self.state,
            threshold_percent=settings.utilization_percent,
            window_s=settings.window,
            now=now,
        )
        self.state, self.idle = verdict.state, verdict.idle
        if not verdict.newly_idle:
            return
        with sessions() as session:
            for job in verdict.newly_idle:
                events.record(
                    session,
                    kind="Job",
                    name=job.job,
                    tenant=job.tenant,
                    reason=JobEventReason.GPUS_IDLE,
                    message=(
                        f"{counted(job.idle_gpus, 'GPU')} under "
                        f"{settings.utilization_percent:g}% utilization for "
                        f"{settings.window:g}s or more"
                    ),
                    at=now,
                    warning=True,
                )
            session.commit()


def read_use(session: Session, nodes: list[str]) -> dict[str, NodeUse]:
    """Each node's latest reading: its time and every GPU's utilization.

    Read from the stored JSON (validated as a ``NodeReading`` when the agent's report came in)
    without building the model again: only two fields of each GPU are needed.
    """
    use: dict[str, NodeUse] = {}
    for first in range(0, len(nodes), CHUNK):
        chunk = nodes[first : first + CHUNK]
        query = select(NodeReadingRow.node, NodeReadingRow.taken_at, NodeReadingRow.reading)
        for node, taken_at, reading in session.execute(
            query.where(NodeReadingRow.node.in_(chunk))
        ).all():
            use[node] = NodeUse(taken_at, utilization_of(reading))
    return use


def utilization_of(reading: Mapping[str, Any]) -> dict[int, float | None]:
    """GPU index to utilization percent (None where the agent could not read it)."""
    result: dict[int, float | None] = {}
    for gpu in reading.get("gpus") or ():
        index, value = gpu.get("index"), gpu.get("utilization_percent")
        if isinstance(index, int):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            result[index] = float(value) if ok else None
    return result
