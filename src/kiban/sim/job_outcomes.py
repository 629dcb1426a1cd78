"""Every job's outcome in a replay, one CSV row each: where a policy's average comes from.

The summary figures say how much one policy beats another; the rows say for which jobs (by
team, size or run time), e.g. that recommended's loss to oracle SRTF at load 1.5 lies in two
teams' 8-GPU jobs. Times are seconds from the replay's first submission; a job that never
finished has empty finish, JCT and queueing cells.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from pathlib import Path

from kiban.sim.engine import JobRun, SimOutcome
from kiban.sim.metrics import jct as jct_of

COLUMNS = (
    "policy",
    "job",
    "tenant",
    "queue",
    "gpus",
    "duration_s",
    "submitted_s",
    "first_start_s",
    "finished_s",
    "jct_s",
    "queueing_s",
    "preemptions",
    "lost_s",
    "killed",
)
"""The header of the file, in order: one row per job and policy."""


def _seconds(value: float | None, origin: float) -> str:
    """A time as seconds from ``origin`` to a tenth, or empty when it never came."""
    return "" if value is None else f"{value - origin:.1f}"


def rows(policy: str, outcome: SimOutcome) -> Iterator[tuple[str, ...]]:
    """One row per job of the replay, in the order of its runs (the trace's order)."""
    origin = outcome.start_s
    for run in outcome.runs:
        yield _row(policy, run, origin)


def _row(policy: str, run: JobRun, origin: float) -> tuple[str, ...]:
    job = run.job
    jct = jct_of(run) if run.finished_at is not None and not run.killed else None
    return (
        policy,
        job.id,
        job.tenant,
        job.queue,
        str(job.gpus),
        f"{job.duration_s:.1f}",
        _seconds(job.submit_s, origin),
        _seconds(run.first_start, origin),
        _seconds(run.finished_at, origin),
        "" if jct is None else f"{jct:.1f}",
        "" if jct is None else f"{jct - run.run_s:.1f}",  # as the summary's queueing delay
        str(run.preemptions),
        f"{run.lost_s:.1f}",
        "yes" if run.killed else "no",
    )


def write_job_outcomes(replays: Iterable[tuple[str, SimOutcome]], path: Path) -> int:
    """Write every job's row of each (policy, outcome) to ``path`` (made anew, written to a
    sibling first so that a failure leaves no half file); returns the rows written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    written = 0
    try:
        with partial.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMNS)
            for policy, outcome in replays:
                for row in rows(policy, outcome):
                    writer.writerow(row)
                    written += 1
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return written
