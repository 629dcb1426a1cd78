"""The core run forward in simulated time: applying decisions, and start-time forecasts.

``advance`` applies one cycle's decisions to a snapshot (admitted jobs start, preempted ones
return to their queues at once) and ``forecast`` repeats cycle, then jump to the next time a
running job reaches its ``maxRuntime``, until every pending job has started or nothing more
can happen (Slurm's ``squeue --start`` does the same over its job time limits). The forecast
assumes no new submissions, no preemption and that every job runs its whole maxRuntime, or
when it has none its estimated run time (``estimated_runtime``; the starts that come after such
an end are marked estimated); a job behind one with neither gets no estimate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.core import schedule
from kiban.scheduler.decisions import Admit, Decisions
from kiban.scheduler.policy import Policy
from kiban.scheduler.snapshot import (
    PendingJob,
    RunningJob,
    RunningReplica,
    Snapshot,
    TaskDemand,
)


def advance(snapshot: Snapshot, decisions: Decisions, protect_s: float = 0.0) -> Snapshot:
    """The snapshot after the decisions take effect (preempted jobs stop at once)."""
    victims = {p.victim_id for p in decisions.preempted}
    pending = {j.id: j for j in snapshot.pending}
    nominated: dict[str, set[str]] = {}
    for p in decisions.preempted:
        nominated.setdefault(p.preemptor_id, set()).update(p.nodes)
    for job_id, nodes in nominated.items():
        if job_id in pending:
            pending[job_id] = replace(pending[job_id], nominated_nodes=tuple(sorted(nodes)))
    started = [
        _as_running(pending.pop(a.job_id), a, snapshot, protect_s) for a in decisions.admitted
    ]
    preemptor = {p.victim_id: p.preemptor_id for p in decisions.preempted}
    stopped = [r for r in snapshot.running if r.id in victims]
    still = [r for r in snapshot.running if r.id not in victims]
    requeued = [as_pending(r, preemptor[r.id]) for r in stopped]
    return _changed(
        snapshot,
        running=[*still, *started],
        pending=[*pending.values(), *requeued],
        started=started,
        stopped=stopped,
    )


def finish(snapshot: Snapshot, job_ids: set[str], now: float) -> Snapshot:
    """The snapshot at ``now`` after the named running jobs ended."""
    ended = [r for r in snapshot.running if r.id in job_ids]
    kept = [r for r in snapshot.running if r.id not in job_ids]
    after = _changed(snapshot, kept, list(snapshot.pending), started=[], stopped=ended)
    return replace(after, now=now)


FORECAST_RESOLUTION = 0.02
"""Ends within this share of the time ahead (at least a second) are taken together."""


def forecast(
    snapshot: Snapshot,
    policy: Policy,
    horizon_s: float = 30 * 86400,
    max_cycles: int = 200,
    resolution: float = FORECAST_RESOLUTION,
    estimated: set[str] | None = None,
) -> dict[str, float | None]:
    """Estimated start time per pending job (None: none within the horizon or the cycles),
    from the core run forward over the running jobs' maxRuntimes.

    Jobs ending close together finish in one step, at the last of their ends: within
    ``resolution`` of the time ahead (2 %: a minute on a start 50 minutes away), so a long
    queue needs far fewer cycles, and an estimate is never earlier than the capacity it waits
    for is free. ``estimated`` (when given) receives the jobs whose start comes at or after
    the first end taken from an estimated run time rather than a maxRuntime."""
    what_if = replace(policy, preemption=False)
    starts: dict[str, float | None] = {j.id: None for j in snapshot.pending}
    state = snapshot
    cycles = 0
    cache = CapacityCache()
    guessed_from = float("inf")  # the first end that came from an estimated run time
    while state.pending and cycles < max_cycles:
        decisions = schedule(state, what_if, cache)
        cycles += 1
        for admit in decisions.admitted:
            starts[admit.job_id] = state.now
            if estimated is not None and state.now >= guessed_from:
                estimated.add(admit.job_id)
        state = advance(state, decisions)
        if decisions.more:
            continue  # the cycle stopped at its budget: the next one runs at the same time
        ends = [r.expected_end for r in state.running if r.expected_end is not None]
        upcoming = [e for e in ends if e > state.now]
        if not state.pending or not ends:
            break
        at = min(upcoming) if upcoming else state.now
        if at > snapshot.now + horizon_s:
            break
        window = at + max(1.0, resolution * (at - snapshot.now))
        batch = [e for e in ends if e <= window]
        at = max(batch)
        ending = [r for r in state.running if r.expected_end is not None and r.expected_end <= at]
        if any(r.end_estimated for r in ending):
            guessed_from = min(guessed_from, at)
        ended = {r.id for r in ending}
        state = finish(state, ended, at)
    return starts


# -- rebuilding snapshots ------------------------------------------------------------------------
def _as_running(job: PendingJob, admit: Admit, snapshot: Snapshot, protect_s: float) -> RunningJob:
    return RunningJob(
        id=job.id,
        queue=job.queue,
        tenant=job.tenant,
        priority=job.priority,
        submitted_at=job.submitted_at,
        started_at=snapshot.now,
        replicas=tuple(
            RunningReplica(p.node, p.gpu_ids, p.cpu_millis, p.memory, p.extended)
            for p in admit.placements
        ),
        flavor_gpus={admit.flavor: sum(len(p.gpu_ids) for p in admit.placements)},
        flavor_extended={admit.flavor: job.total_extended} if job.total_extended else {},
        max_runtime=job.max_runtime,
        protected_until=snapshot.now + protect_s,
        attained_service=job.attained_service,
        tasks=job.tasks,
        estimated_runtime=job.estimated_runtime,
    )


def as_pending(job: RunningJob, preempted_by: str) -> PendingJob:
    """A preempted job back in its queue, keeping its submit time; its tasks as it asked when
    admitted (node constraints and spread included), else its shape from its replicas."""
    tasks = job.tasks or tuple(
        TaskDemand(f"r{i}", 1, len(r.gpu_ids), r.cpu_millis, r.memory, extended=r.extended)
        for i, r in enumerate(job.replicas)
    )
    return PendingJob(
        id=job.id,
        queue=job.queue,
        priority=job.priority,
        submitted_at=job.submitted_at,
        tasks=tasks,
        gang_size=min(len(job.replicas), sum(t.replicas for t in tasks)),
        tenant=job.tenant,
        max_runtime=job.max_runtime,
        preempted_by=preempted_by,
        attained_service=job.attained_service,
        estimated_runtime=job.estimated_runtime,
    )


def _queue(snapshot: Snapshot, name: str, flavor: str) -> Mapping[str, int]:
    """The extended resources a queue uses of a flavor in the snapshot."""
    for q in snapshot.queues:
        if q.name == name:
            return q.extended_used.get(flavor, {})
    return {}


def _changed(
    snapshot: Snapshot,
    running: list[RunningJob],
    pending: list[PendingJob],
    started: list[RunningJob],
    stopped: list[RunningJob],
) -> Snapshot:
    """Nodes' free capacity and queues' usage adjusted for the jobs started and stopped.

    Views of nodes no job touched are kept as they are (a ``CapacityCache`` relies on it)."""
    by_name = {n.name: n for n in snapshot.nodes}
    gpu_ids: dict[str, set[int]] = {}
    cpu: dict[str, int] = {}
    memory: dict[str, int] = {}
    extended: dict[str, dict[str, int]] = {}
    used = {q.name: dict(q.used) for q in snapshot.queues}
    used_extended: dict[str, dict[str, dict[str, int]]] = {}
    for jobs, sign in ((started, -1), (stopped, 1)):
        for job in jobs:
            for r in job.replicas:
                if r.node not in by_name:
                    continue
                if r.node not in gpu_ids:
                    node = by_name[r.node]
                    gpu_ids[r.node] = set(node.free_gpu_ids)
                    cpu[r.node] = node.free_cpu_millis
                    memory[r.node] = node.free_memory
                if sign < 0:
                    gpu_ids[r.node].difference_update(r.gpu_ids)
                else:
                    gpu_ids[r.node].update(r.gpu_ids)
                cpu[r.node] += sign * r.cpu_millis
                memory[r.node] += sign * r.memory
                if r.extended:
                    free = extended.setdefault(r.node, dict(by_name[r.node].free_extended))
                    for name, amount in r.extended:
                        free[name] = free.get(name, 0) + sign * amount
            per_flavor = used.setdefault(job.queue, {})
            for flavor, gpus in job.flavor_gpus.items():
                per_flavor[flavor] = per_flavor.get(flavor, 0) - sign * gpus
            for flavor, amounts in job.flavor_extended.items():
                queue_used = used_extended.setdefault(job.queue, {})
                if flavor not in queue_used:
                    queue_used[flavor] = dict(_queue(snapshot, job.queue, flavor))
                for name, amount in amounts:
                    queue_used[flavor][name] = queue_used[flavor].get(name, 0) - sign * amount
    nodes = tuple(
        replace(
            n,
            free_gpu_ids=tuple(sorted(gpu_ids[n.name])),
            free_cpu_millis=cpu[n.name],
            free_memory=memory[n.name],
            free_extended=extended.get(n.name, n.free_extended),
        )
        if n.name in gpu_ids
        else n
        for n in snapshot.nodes
    )
    queues = tuple(
        replace(
            q,
            used=used[q.name],
            extended_used={**q.extended_used, **used_extended.get(q.name, {})},
        )
        if used[q.name] != q.used or q.name in used_extended
        else q
        for q in snapshot.queues
    )
    return replace(
        snapshot, nodes=nodes, queues=queues, running=tuple(running), pending=tuple(pending)
    )
