"""Which running jobs hold idle GPUs: a pure function of the agents' latest readings.

A GPU of a job is idle while its utilization reads under the policy's ``utilizationPercent``;
its idle spell starts at the first such reading (taken after the job started) and ends at the
first reading at or above the threshold. A GPU whose reading is missing, has no utilization,
predates the job or is older than the window (its agent stopped reporting) is unknown: not
counted, and its spell starts again once it reads idle. A job whose every GPU with a known
reading (at least one) has been idle for the whole window is idle: it gets one event per spell,
and its spell ends only when a GPU of it reads busy again (not when a reading goes missing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

GpuKey = tuple[str, str, int]
"""(job id, node, GPU index)."""


@dataclass(frozen=True, slots=True)
class HeldJob:
    """A running job and the GPUs it holds, as (node, GPU index)."""

    id: str
    tenant: str
    queue: str
    started_at: float
    gpus: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class NodeUse:
    """A node's latest reading: when it was taken, and each GPU's utilization (None: not read)."""

    taken_at: float
    utilization: Mapping[int, float | None]


@dataclass(frozen=True, slots=True)
class IdleState:
    """What one judgement hands the next: when each idle GPU's spell began, and the jobs whose
    current idle spell has had its event."""

    since: Mapping[GpuKey, float] = field(default_factory=dict)
    announced: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class IdleJob:
    """A job with GPUs idle for longer than the window: how many, and since when (the most
    recent start among them)."""

    job: str
    tenant: str
    queue: str
    idle_gpus: int
    since: float


@dataclass(frozen=True, slots=True)
class IdleVerdict:
    """``idle``: every job with GPUs idle past the window (the metric); ``newly_idle``: jobs
    whose every known GPU became idle past the window in this judgement (one event each)."""

    state: IdleState
    idle: tuple[IdleJob, ...]
    newly_idle: tuple[IdleJob, ...]


def judge_idle(
    jobs: Iterable[HeldJob],
    use: Mapping[str, NodeUse],
    before: IdleState,
    *,
    threshold_percent: float,
    window_s: float,
    now: float,
) -> IdleVerdict:
    """The idle GPUs of ``jobs`` as of ``now``, from each node's latest reading in ``use``."""
    since: dict[GpuKey, float] = {}
    announced: set[str] = set()
    idle: list[IdleJob] = []
    newly: list[IdleJob] = []
    for job in sorted(jobs, key=lambda j: j.id):
        known = busy = past = 0
        latest_start = float("-inf")
        for node, gpu in job.gpus:
            reading = use.get(node)
            utilization = None if reading is None else reading.utilization.get(gpu)
            if (
                reading is None
                or utilization is None
                or reading.taken_at < job.started_at
                or now - reading.taken_at > window_s
            ):
                continue  # unknown: not counted, and its spell (if any) is over
            known += 1
            if utilization >= threshold_percent:
                busy += 1
                continue
            key = (job.id, node, gpu)
            start = before.since.get(key, reading.taken_at)
            since[key] = start
            if now - start >= window_s:
                past += 1
                latest_start = max(latest_start, start)
        if not past:
            if job.id in before.announced and not busy:
                announced.add(job.id)  # nothing read busy: the spell goes on
            continue
        verdict = IdleJob(job.id, job.tenant, job.queue, past, latest_start)
        idle.append(verdict)
        if past == known:
            announced.add(job.id)
            if job.id not in before.announced:
                newly.append(verdict)
        elif job.id in before.announced and not busy:
            announced.add(job.id)
    return IdleVerdict(IdleState(since, frozenset(announced)), tuple(idle), tuple(newly))
