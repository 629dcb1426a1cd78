"""The notebook controller: readiness, idle culling and the end of each notebook's run.

A pass (a hook of the control loop, at most every ``every_s``):

1. Observe: one short read transaction copies every active notebook, its job's state and the
   address of its server (``executor.replica_address``) into plain values.
2. With no session open: ask each running server for ``/api/status`` and ``/api/kernels``
   (all at once, each within ``probe_timeout_s``; one that does not answer counts as silent).
3. Decide: ``notebook_culling.decide`` for each.
4. Apply: each change in its own short transaction, which reads the notebook again and gives
   way to a change made since (a user's stop, a new start).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass, field
from datetime import datetime

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kiban.control.settling import replica_ref
from kiban.domain.event_reasons import JobEventReason
from kiban.domain.notebook import (
    DEFAULT_READY_TIMEOUT_S,
    NotebookSpec,
    NotebookState,
    notebook_url,
)
from kiban.domain.notebook_culling import (
    JupyterActivity,
    NotebookAction,
    NotebookDecision,
    NotebookObservation,
    decide,
)
from kiban.domain.states import JobState
from kiban.executors.base import Executor
from kiban.services import notebooks
from kiban.store.models import Job
from kiban.store.models_serving import NotebookRow

log = logging.getLogger("kiban.notebooks")


@dataclass(frozen=True)
class _Seen:
    id: int
    job_id: str | None
    observation: NotebookObservation
    address: str | None  # base URL of its server (None: not running)
    token: str | None


def parse_jupyter_time(value: str) -> float:
    """Jupyter's ISO 8601 times (``2026-11-26T17:00:00.123456Z``) as UNIX seconds."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def read_activity(client: httpx.Client, base: str, token: str, timeout: float) -> JupyterActivity:
    """Ask a Jupyter server for its activity; httpx errors and bad answers raise."""
    headers = {"Authorization": f"token {token}"}
    status = client.get(f"{base}api/status", headers=headers, timeout=timeout)
    status.raise_for_status()
    kernels = client.get(
        f"{base}api/kernels", params={"no_track_activity": "1"}, headers=headers, timeout=timeout
    )
    kernels.raise_for_status()
    body = status.json()
    busy = sum(1 for k in kernels.json() if k.get("execution_state") == "busy")
    return JupyterActivity(
        last_activity=parse_jupyter_time(str(body["last_activity"])),
        busy_kernels=busy,
        connections=int(body.get("connections", 0)),
    )


@dataclass
class NotebookController:
    """Follows notebooks; ``tick`` is the control loop's hook (True: it changed jobs)."""

    sessions: sessionmaker[Session]
    executor: Executor
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    every_s: float = 2.0
    probe_timeout_s: float = 1.0
    probe: Callable[[str, str], JupyterActivity] | None = None
    """How a server's activity is read (tests give their own); raises when it does not answer."""
    _last: float = float("-inf")
    _http: httpx.Client = field(default_factory=lambda: httpx.Client(trust_env=False))
    _pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(8, thread_name_prefix="kiban-notebook")
    )

    def tick(self, now: float) -> bool:
        if now - self._last < self.every_s:
            return False
        self._last = now
        try:
            return self.run_once(now)
        except Exception:
            log.exception("notebook pass failed")
            return False

    def run_once(self, now: float) -> bool:
        seen = self._observe()
        if not seen:
            return False
        activity = self._gather(seen)
        changed = False
        for item in seen:
            observation = item.observation
            if item.id in activity:
                observation = NotebookObservation(
                    **{**observation.__dict__, "activity": activity[item.id]}
                )
            decision = decide(observation, now, self.ready_timeout_s)
            if decision.action is not NotebookAction.KEEP:
                changed = self._apply(item, decision, now) or changed
        return changed

    def _observe(self) -> list[_Seen]:
        active = [s.value for s in NotebookState if s.active]
        out = []
        with self.sessions() as session:
            rows = session.scalars(select(NotebookRow).where(NotebookRow.state.in_(active)))
            for row in rows:
                job = session.get(Job, row.job_id) if row.job_id else None
                address = token = None
                running = notebooks.running_replica(session, row)
                if running is not None:
                    job_row, replica = running
                    assert job_row.master_port is not None
                    where = self.executor.replica_address(replica_ref(replica), job_row.master_port)
                    if where is not None:
                        address = f"http://{where}{notebook_url(row.tenant, row.name)}"
                        token = notebooks.token_of(session, row.tenant, row.name, job_row.id)
                spec = NotebookSpec.model_validate(row.spec)
                observation = NotebookObservation(
                    state=NotebookState(row.state),
                    job_state=None if job is None else JobState(job.state),
                    job_started_at=None if job is None else job.started_at,
                    ready_at=row.ready_at,
                    idle_timeout_s=spec.idle_timeout,
                    activity=None,
                )
                out.append(_Seen(row.id, row.job_id, observation, address, token))
            session.commit()  # the key, when this pass made it
        return out

    def _read(self, base: str, token: str) -> JupyterActivity:
        if self.probe is not None:
            return self.probe(base, token)
        return read_activity(self._http, base, token, self.probe_timeout_s)

    def _gather(self, seen: list[_Seen]) -> dict[int, JupyterActivity]:
        asked: dict[int, Future[JupyterActivity]] = {
            item.id: self._pool.submit(self._read, item.address, item.token)
            for item in seen
            if item.address is not None and item.token is not None
        }
        wait_all(list(asked.values()), timeout=self.probe_timeout_s * 3)
        out = {}
        for key, future in asked.items():
            if future.done() and future.exception() is None:
                out[key] = future.result()
        return out

    def _apply(self, item: _Seen, decision: NotebookDecision, now: float) -> bool:
        with self.sessions() as session:
            row = session.get(NotebookRow, item.id, with_for_update=True)
            if row is None or row.job_id != item.job_id or not NotebookState(row.state).active:
                return False  # stopped or started again since
            action = decision.action
            changed = False
            if action is NotebookAction.READY:
                row.state = NotebookState.RUNNING.value
                row.ready_at = now
                row.last_activity = decision.last_activity
            elif action is NotebookAction.ACTIVE:
                row.last_activity = decision.last_activity
            elif action is NotebookAction.CULL:
                spec = NotebookSpec.model_validate(row.spec)
                message = (
                    f"culled: idle {decision.idle_s:.0f}s, longer than its idleTimeout "
                    f"{spec.idle_timeout:g}s, with no kernel executing; its directory is kept"
                )
                notebooks.stop_run(
                    session, row, NotebookState.STOPPED, JobEventReason.CULLED, message, now
                )
                changed = True
            elif action is NotebookAction.NOT_READY:
                message = (
                    f"JupyterLab did not answer /api/status within {self.ready_timeout_s:g}s "
                    "of its job starting"
                )
                notebooks.stop_run(
                    session,
                    row,
                    NotebookState.FAILED,
                    JobEventReason.NOTEBOOK_NOT_READY,
                    message,
                    now,
                )
                changed = True
            elif action is NotebookAction.ENDED:
                row.state = NotebookState.STOPPED.value
                row.reason = row.reason or _job_end(session, row.job_id)
            elif action is NotebookAction.FAILED:
                row.state = NotebookState.FAILED.value
                row.reason = row.reason or _job_end(session, row.job_id)
            session.commit()
            return changed


def _job_end(session: Session, job_id: str | None) -> str:
    job = session.get(Job, job_id) if job_id else None
    if job is None:
        return "its job is gone"
    return f"its job {job.id} ended {job.state}" + (f": {job.message}" if job.message else "")
