"""Run-time estimates kept across restarts: finished runs filed in the store, learned from in
memory.

When a job succeeds on its first attempt, ``record_finished`` (called where its end is
recorded, in the same transaction) files how long it ran. ``RuntimeEstimates`` holds the pure
learner (``kiban.domain.runtime_estimate``) and brings it up to date from the rows filed since
its last look, so a restarted control plane learns the history back on its first pass, and the
API and the loop see the same runs. The table keeps only the newest ``MAX_ROWS`` rows (the
loop deletes older ones), more than the learner's per-key window ever needs.

Only first attempts that succeeded are learned from: a failed or cancelled run says little of
how long the work takes, and a requeued job's start time is its first attempt's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydantic import ValidationError
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from kiban.domain.jobspec import JobSpec
from kiban.domain.manifests import parse_job_manifest
from kiban.domain.runtime_estimate import (
    JobFeatures,
    RuntimeEstimate,
    RuntimeEstimator,
    command_digest,
    planned_runtime,
)
from kiban.domain.states import JobState
from kiban.store.models import Job, RuntimeObservation

MAX_FEATURES = 50_000
"""Jobs whose features are remembered (the cache is emptied when it reaches this many)."""

MAX_ROWS = 20_000
"""Finished runs kept in the store; the oldest beyond these are deleted."""

PRUNE_EVERY = 500
"""Rows filed between deletions of the oldest (so a pass rarely deletes anything)."""


def spec_command(spec: JobSpec) -> str:
    """A digest of what the job runs: every task's command and arguments, in order."""
    words: list[str] = []
    for task in spec.tasks:
        words.extend([task.name, *task.command, *task.args, "\x1f"])
    return command_digest(words)


def spec_features(
    *, tenant: str, user: str | None, name: str | None, queue: str, spec: JobSpec
) -> JobFeatures:
    """A job's features from its row's columns and its parsed spec."""
    return JobFeatures(tenant, user, name, spec_command(spec), spec.total_gpus, queue)


def job_features(job: Job, spec: JobSpec | None = None) -> JobFeatures:
    """What the job is known by before it runs (its command from ``spec`` or its manifest;
    None when that cannot be read)."""
    if spec is None:
        spec = _spec(job)
    gpus = job.gpus if job.gpus is not None else (spec.total_gpus if spec is not None else 0)
    return JobFeatures(
        tenant=job.tenant,
        user=job.submitted_by,
        name=job.name,
        command=None if spec is None else spec_command(spec),
        gpus=gpus,
        queue=job.queue,
    )


def _spec(job: Job) -> JobSpec | None:
    try:
        return parse_job_manifest(job.spec).spec
    except (ValidationError, ValueError, TypeError):
        return None


def record_finished(session: Session, job: Job, at: float) -> None:
    """File the run time of a job that succeeded at ``at`` on its first attempt (others: not)."""
    if job.attempt != 1 or job.started_at is None or at < job.started_at:
        return
    f = job_features(job)
    session.add(
        RuntimeObservation(
            job_id=job.id,
            tenant=f.tenant,
            member=f.user,
            name=f.name,
            command=f.command,
            gpus=f.gpus,
            queue=f.queue,
            runtime_s=at - job.started_at,
            finished_at=at,
        )
    )


class RuntimeEstimates:
    """The learner and the last filed run it has learned; thread-safe (the loop and the API's
    requests share one)."""

    def __init__(
        self,
        max_rows: int = MAX_ROWS,
        estimator: RuntimeEstimator | None = None,
        prune_every: int = PRUNE_EVERY,
    ):
        self.max_rows = max_rows
        self.prune_every = prune_every
        self._estimator = estimator or RuntimeEstimator()
        self._last_id = 0
        self._pruned_at = 0
        self._memo: dict[JobFeatures, RuntimeEstimate | None] = {}
        self._features: dict[str, JobFeatures] = {}
        self._lock = threading.Lock()

    def features_of(self, job_id: str, make: Callable[[], JobFeatures]) -> JobFeatures:
        """The job's features, made once per job (its command's digest is not free)."""
        found = self._features.get(job_id)
        if found is None:
            if len(self._features) >= MAX_FEATURES:
                self._features.clear()
            found = self._features[job_id] = make()
        return found

    def refresh(self, session: Session, *, prune: bool = False) -> int:
        """Learn the runs filed since the last look (all kept ones, the first time); with
        ``prune``, delete the rows older than the newest ``max_rows``. How many it learned."""
        with self._lock:
            rows = session.execute(
                select(
                    RuntimeObservation.id,
                    RuntimeObservation.tenant,
                    RuntimeObservation.member,
                    RuntimeObservation.name,
                    RuntimeObservation.command,
                    RuntimeObservation.gpus,
                    RuntimeObservation.queue,
                    RuntimeObservation.runtime_s,
                    RuntimeObservation.finished_at,
                )
                .where(RuntimeObservation.id > self._last_id)
                .order_by(RuntimeObservation.id)
            ).all()
            for row in rows:
                features = JobFeatures(
                    row.tenant, row.member, row.name, row.command, row.gpus, row.queue
                )
                self._estimator.observe(features, row.runtime_s, row.finished_at)
                self._last_id = row.id
            if rows:
                self._memo.clear()
            if prune and self._last_id - self._pruned_at >= self.prune_every:
                cut = self._last_id - self.max_rows
                if cut > 0:
                    session.execute(delete(RuntimeObservation).where(RuntimeObservation.id <= cut))
                    session.commit()
                self._pruned_at = self._last_id
            return len(rows)

    def estimate(self, features: JobFeatures) -> RuntimeEstimate | None:
        """The learner's estimate (remembered until it learns more)."""
        with self._lock:
            if features not in self._memo:
                self._memo[features] = self._estimator.estimate(features)
            return self._memo[features]

    def planned_runtime(
        self, features: JobFeatures, started_at: float | None, now: float
    ) -> float | None:
        """The run time to plan with for a job with no maxRuntime: its estimate, stretched
        once a running job nears or passes it (``planned_runtime``); None: no estimate."""
        found = self.estimate(features)
        if found is None:
            return None
        elapsed = 0.0 if started_at is None else max(0.0, now - started_at)
        return planned_runtime(found.seconds, elapsed)

    def error_summary(self) -> dict[str, float]:
        with self._lock:
            return self._estimator.error_summary()


def estimate_for_job(
    estimates: RuntimeEstimates, session: Session, job: Job
) -> RuntimeEstimate | None:
    """The estimate shown for a waiting or running job with no maxRuntime (None: it has one,
    it has ended, or nothing like it has finished yet)."""
    if JobState(job.state).terminal:
        return None
    spec = _spec(job)
    if spec is None or spec.max_runtime is not None:
        return None
    estimates.refresh(session)
    return estimates.estimate(job_features(job, spec))
