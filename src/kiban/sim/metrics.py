"""What a replay measured: completion times, queueing, allocation, fairness, preemption cost.

- JCT: finish - submit, of the jobs that finished (a job killed at its time limit is not one).
- Queueing delay: JCT - time spent running, i.e. all the time it waited, after preemptions too.
- Makespan: the last finish - the first submission.
- GPU allocation: allocated GPU-seconds / (the cluster's GPUs x makespan).
- rho (finish-time fairness, Themis): per tenant, its average JCT in the shared cluster / its
  average JCT alone on its own quota (see ``kiban.sim.run``); max and median over tenants.
- Preemptions, and the GPU-hours of work they threw away (run since the last checkpoint).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kiban.sim.engine import JobRun, SimOutcome
from kiban.stats import percentile

JSON_KEYS = (
    "jobs",
    "avg_jct_s",
    "median_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "p99_queue_s",
    "makespan_s",
    "gpu_allocation",
    "max_rho",
    "median_rho",
    "preemptions",
    "lost_gpu_hours",
    "wall_s",
)
"""The keys of ``kiban sim --json``, in order."""


def jct(run: JobRun) -> float:
    assert run.finished_at is not None
    return run.finished_at - run.job.submit_s


def completed(runs: Sequence[JobRun]) -> list[JobRun]:
    return [r for r in runs if r.finished_at is not None and not r.killed]


def mean_jct_by_tenant(runs: Sequence[JobRun]) -> dict[str, float]:
    """Each tenant's average JCT over its completed jobs."""
    totals: dict[str, list[float]] = {}
    for run in completed(runs):
        entry = totals.setdefault(run.job.tenant, [0.0, 0.0])
        entry[0] += jct(run)
        entry[1] += 1
    return {tenant: total / count for tenant, (total, count) in totals.items()}


def rhos(shared: Mapping[str, float], alone: Mapping[str, float]) -> dict[str, float]:
    """rho per tenant: average JCT shared / average JCT alone (tenants with both)."""
    return {t: shared[t] / alone[t] for t in sorted(shared) if alone.get(t, 0) > 0}


@dataclass(frozen=True)
class Summary:
    """The figures of one replay: ``as_json`` gives exactly the ``--json`` keys."""

    figures: dict[str, Any]
    extra: dict[str, Any]
    rho_by_tenant: dict[str, float]

    def as_json(self) -> dict[str, Any]:
        data = {key: self.figures[key] for key in JSON_KEYS}
        if "estimate_mdape_percent" in self.extra:  # a policy that estimates run times
            data["estimate_mdape_percent"] = self.extra["estimate_mdape_percent"]
        return data


def summarize(outcome: SimOutcome, rho_by_tenant: Mapping[str, float] | None) -> Summary:
    """The figures of a replay; ``rho_by_tenant`` None when fairness was not measured."""
    runs = outcome.runs
    done = completed(runs)
    jcts = [jct(r) for r in done]
    queued = [jct(r) - r.run_s for r in done]
    finishes = [r.finished_at for r in runs if r.finished_at is not None]
    first = min((r.job.submit_s for r in runs), default=outcome.start_s)
    makespan = (max(finishes) - first) if finishes else 0.0
    capacity = outcome.total_gpus * makespan
    rho_values = list((rho_by_tenant or {}).values())
    figures: dict[str, Any] = {
        "jobs": len(done),
        "avg_jct_s": _round(statistics.fmean(jcts) if jcts else math.nan),
        "median_jct_s": _round(statistics.median(jcts) if jcts else math.nan),
        "p99_jct_s": _round(percentile(jcts, 99)),
        "avg_queue_s": _round(statistics.fmean(queued) if queued else math.nan),
        "p99_queue_s": _round(percentile(queued, 99)),
        "makespan_s": _round(makespan),
        "gpu_allocation": round(outcome.allocated_gpu_s / capacity, 4) if capacity else None,
        "max_rho": round(max(rho_values), 3) if rho_values else None,
        "median_rho": round(statistics.median(rho_values), 3) if rho_values else None,
        "preemptions": sum(r.preemptions for r in runs),
        "lost_gpu_hours": round(sum(r.lost_s * r.job.gpus for r in runs) / 3600, 2),
        "wall_s": round(outcome.wall_s, 2),
    }
    never = [r for r in runs if r.first_start is None]
    reasons: dict[str, int] = {}
    for run in never:
        code = run.waiting_reason or "unknown"
        reasons[code] = reasons.get(code, 0) + 1
    extra: dict[str, Any] = {
        "jobs_submitted": len(runs),
        "never_started": len(never),
        "never_started_reasons": reasons,
        "killed_at_time_limit": sum(r.killed for r in runs),
        "cycles": outcome.cycles,
        "core_s": round(outcome.core_s, 2),
        "instants_at_cycle_cap": outcome.capped_instants,
        "preemption_loops": outcome.preemption_loops,
    }
    if outcome.estimate_error is not None:  # the run-time estimator's own error, as it learned
        mdape = outcome.estimate_error["mdape"]
        extra["estimate_mdape_percent"] = None if math.isnan(mdape) else round(mdape, 1)
        extra["estimates_checked"] = int(outcome.estimate_error["samples"])
    return Summary(figures, extra, dict(rho_by_tenant or {}))


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 1)


def failed_summary(error: str) -> Summary:
    """The figures of a replay that could not finish: all null, and why."""
    return Summary(dict.fromkeys(JSON_KEYS), {"error": error, "never_started": 0}, {})
