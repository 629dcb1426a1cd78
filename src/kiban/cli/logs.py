"""``kiban logs``: a job's output on stdout, and on stderr where it ran, or why there is none.

stdout holds the job's output only, so ``kiban logs JOB > out.txt`` is what the job printed;
the ``=== kiban: ...`` lines saying where each replica ran go to stderr. A job that never
started has no output: that is said (pending and why, cancelled before it started, ...) and the
command exits 1 rather than printing nothing.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta
from typing import Any

from kiban.sdk.client import Client

TERMINAL = frozenset({"Succeeded", "Failed", "Cancelled"})
DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)([smhd]))+$")
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
TIME_OF_DAY = re.compile(r"^\d{1,2}:\d{2}(:\d{2})?$")


def parse_since(text: str, now: datetime | None = None) -> timedelta | datetime:
    """``--since``: a duration (``90s``, ``10m``, ``2h``, ``1d``, ``1h30m``) or a time: ISO 8601
    (``2024-05-01T10:00``, ``2024-05-01 10:00:00+09:00``; without an offset, local time) or a
    time of today (``10:00``). A ValueError says what is accepted."""
    text = text.strip()
    if DURATION.match(text):
        seconds = sum(float(n) * UNIT_S[u] for n, u in DURATION_PART.findall(text))
        return timedelta(seconds=seconds)
    if TIME_OF_DAY.match(text):
        today = (now or datetime.now()).date().isoformat()
        text = f"{today}T{text}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (10m, 2h, 1d, 1h30m) nor a time "
            "(2024-05-01T10:00, 10:00)"
        ) from None


def where_ran(job: dict[str, Any], ranks: set[int] | None) -> list[str]:
    """The ``=== kiban:`` lines of the job's current attempt, for ``ranks`` (None: all)."""
    lines = []
    for replica in job.get("replicas") or []:
        if ranks is not None and replica["rank"] not in ranks:
            continue
        gpus = ",".join(map(str, replica.get("gpuIds") or [])) or "none"
        lines.append(
            f"=== kiban: job {job['id']}, attempt {job['attempt']}: {replica['task']}"
            f"[{replica['index']}] rank {replica['rank']} on {replica['node']}, GPUs {gpus}"
        )
    return lines


def never_started(job: dict[str, Any]) -> str | None:
    """Why the job has no output at all, or None when it has started (some time)."""
    if job.get("startedAt") is not None or job.get("replicas"):
        return None
    state = job["state"]
    reason = job.get("reason") or {}
    why = f"{reason.get('code')}: {reason.get('message')}" if reason.get("code") else ""
    if state == "Cancelled":
        return f"job {job['id']} was cancelled before it started; it has no output"
    if state in TERMINAL:
        detail = f": {job['message']}" if job.get("message") else ""
        return f"job {job['id']} ended {state} before it started{detail}; it has no output"
    return f"job {job['id']} has not started: it is {state}" + (f" ({why})" if why else "")


def show_logs(
    api: Client,
    job_id: str,
    *,
    rank: int,
    follow: bool,
    all_ranks: bool,
    tail: int | None,
    since: timedelta | datetime | None,
    timestamps: bool,
) -> int:
    """Write the job's output to stdout and where it ran to stderr; the exit code."""
    job = api.job(job_id)
    missing = never_started(job)
    if missing is not None and (not follow or job["state"] in TERMINAL):
        print(f"kiban: {missing}", file=sys.stderr, flush=True)
        return 1
    ranks = None if all_ranks else {rank}
    if missing is not None:
        print(f"kiban: {missing}; following its output once it runs", file=sys.stderr)
    for line in where_ran(job, ranks):
        print(line, file=sys.stderr)
    sys.stderr.flush()
    wrote = False
    for chunk in api.logs(
        job_id,
        rank=rank,
        follow=follow,
        all_ranks=all_ranks,
        tail=tail,
        since=since,
        timestamps=timestamps,
    ):
        if chunk and not wrote and missing is not None:
            # it was pending when the follow began: where it runs is known once it has output
            for line in where_ran(api.job(job_id), ranks):
                print(line, file=sys.stderr, flush=True)
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        wrote = wrote or bool(chunk)
    if not wrote and missing is not None:
        missing = never_started(api.job(job_id))
        if missing is not None:
            print(f"kiban: {missing}", file=sys.stderr, flush=True)
            return 1
    return 0
