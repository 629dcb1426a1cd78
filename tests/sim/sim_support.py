"""Helpers for the simulator's tests: write small traces, replay them, read one job's run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kiban.platform import Platform
from kiban.services import jobs
from kiban.services.auth import Principal
from kiban.sim.engine import JobRun
from kiban.sim.run import SimOptions, SimReport, run_sim
from kiban.store.models import Job

ADMIN = Principal(name="admin", tenant=None, is_admin=True)
CSV_HEADER = "submit_time,duration,gpus,tenant,priority,nodes,gpus_per_node,time_limit"


def write_csv(path: Path, rows: list[str], header: str = CSV_HEADER) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def replay(trace: Path, *policies: str, **options: object) -> SimReport:
    settings: dict[str, object] = {"nodes": 1, "gpus_per_node": 1, "rho": False}
    settings.update(options)
    return run_sim(SimOptions(trace=trace, policies=policies or ("kiban",), **settings))  # type: ignore[arg-type]


def runs_by_line(report: SimReport, policy: int = 0) -> dict[int, JobRun]:
    """Each job's run by its trace line (job ids are ``job-<line>``)."""
    return {int(r.job.id.split("-")[1]): r for r in report.results[policy].outcome.runs}


def jcts(report: SimReport, policy: int = 0) -> dict[int, float]:
    return {
        line: run.finished_at - run.job.submit_s
        for line, run in runs_by_line(report, policy).items()
        if run.finished_at is not None
    }


# -- driving the live control loop (as tests/control/loop_support.py does) ---------------------
def live_submit(platform: Platform, document: dict[str, Any]) -> str:
    with platform.sessions() as session:
        job = jobs.submit(session, ADMIN, document, facts=platform.facts, at=platform.clock.now())
        session.commit()
        return job.id


def live_job(platform: Platform, job_id: str) -> Job:
    with platform.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job
