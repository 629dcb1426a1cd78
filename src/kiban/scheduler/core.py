"""One scheduling cycle over an immutable snapshot. Pure: same snapshot, same decisions."""

from __future__ import annotations

from kiban.scheduler.capacity import CapacityOverlay
from kiban.scheduler.decisions import Admit, Decisions, Wait
from kiban.scheduler.placement import place_gang, task_fits_some_node
from kiban.scheduler.policy import DEFAULT_POLICY, Policy
from kiban.scheduler.reasons import PendingReason, ReasonCode
from kiban.scheduler.snapshot import PendingJob, QueueStrategy, QueueView, Snapshot


def schedule(snapshot: Snapshot, policy: Policy = DEFAULT_POLICY) -> Decisions:
    """Decide which pending jobs start now and where; every other job gets a reason.

    1. Order the pending jobs (policy's order: priority, then submit time).
    2. Take a scratch overlay of free capacity and of each queue's GPUs in use.
    3. Visit the jobs in order. A job in a StrictFIFO queue whose head could not start waits
       behind it.
    4. Check the job against its queue's quota.
    5. Try to place its gang in one transaction; commit if it fits, otherwise it waits with the
       reason and the numbers.
    6. Number the waiting jobs within their queues (1 = next in line), in the order visited.
    """
    ordered = sorted(snapshot.pending, key=policy.order_key)
    overlay = CapacityOverlay(snapshot.nodes)
    queues = {q.name: q for q in snapshot.queues}
    in_use = {q.name: sum(q.used.values()) for q in snapshot.queues}
    blocked_by: dict[str, str] = {}
    admitted: list[Admit] = []
    waiting: list[tuple[PendingJob, PendingReason]] = []

    for job in ordered:
        queue = queues.get(job.queue)
        reason = _blocked_reason(job, queue, blocked_by)
        if reason is None and queue is not None:
            reason = _quota_reason(job, queue, in_use[queue.name])
        if reason is None:
            attempt = place_gang(job, overlay)
            if attempt.fits:
                gpus = sum(len(p.gpu_ids) for p in attempt.placements)
                in_use[job.queue] += gpus
                admitted.append(Admit(job.id, attempt.placements))
                continue
            reason = _capacity_reason(job, overlay, attempt.placed)
        waiting.append((job, reason))
        if queue is not None and queue.strategy is QueueStrategy.STRICT_FIFO:
            blocked_by.setdefault(queue.name, job.id)

    positions: dict[str, int] = {}
    waits = []
    for job, reason in waiting:
        positions[job.queue] = positions.get(job.queue, 0) + 1
        waits.append(Wait(job.id, reason, positions[job.queue]))
    return Decisions(tuple(admitted), tuple(waits))


def _blocked_reason(
    job: PendingJob, queue: QueueView | None, blocked_by: dict[str, str]
) -> PendingReason | None:
    if queue is None:
        return PendingReason(
            ReasonCode.QUEUE_NOT_FOUND, f"queue {job.queue} does not exist", {"queue": job.queue}
        )
    head = blocked_by.get(queue.name)
    if head is not None:
        return PendingReason(
            ReasonCode.BLOCKED_BY_QUEUE_HEAD,
            f"queue {queue.name} is StrictFIFO and job {head} ahead of it cannot start yet",
            {"queue": queue.name, "head": head},
        )
    return None


def _quota_reason(job: PendingJob, queue: QueueView, in_use: int) -> PendingReason | None:
    if queue.nominal is None or job.total_gpus == 0:
        return None
    quota = sum(queue.nominal.values())
    needed = job.total_gpus
    details = {
        "queue": queue.name,
        "needed_gpus": needed,
        "quota_gpus": quota,
        "in_use_gpus": in_use,
        "free_gpus": max(quota - in_use, 0),
    }
    if needed > quota:
        return PendingReason(
            ReasonCode.EXCEEDS_QUEUE_QUOTA,
            f"needs {needed} GPUs; queue {queue.name} has a quota of only {quota}",
            details,
        )
    if in_use + needed > quota:
        return PendingReason(
            ReasonCode.QUEUE_QUOTA_EXHAUSTED,
            f"needs {needed} GPUs; queue {queue.name} has {quota - in_use} free of {quota}",
            details,
        )
    return None


def _capacity_reason(job: PendingJob, overlay: CapacityOverlay, placed: int) -> PendingReason:
    for task in job.tasks:
        fits, blocked = task_fits_some_node(task, overlay)
        if not fits:
            extra = f"; {blocked} node(s) that could are cordoned or unhealthy" if blocked else ""
            return PendingReason(
                ReasonCode.NO_NODE_FITS,
                f"no schedulable node can hold a replica of task {task.name} "
                f"({task.gpu} GPUs, {task.cpu_millis / 1000:g} CPUs){extra}",
                {"task": task.name, "gpu": task.gpu, "unschedulable_nodes_that_fit": blocked},
            )
    free = overlay.total_free_gpus()
    shape = ", ".join(f"{t.replicas}x{t.gpu} GPUs" for t in job.tasks)
    return PendingReason(
        ReasonCode.INSUFFICIENT_CAPACITY,
        f"needs {job.gang_size} replicas together ({shape}); only {placed} fit now; "
        f"{free} GPUs free on {len(overlay.schedulable_nodes())} schedulable nodes",
        {
            "gang_size": job.gang_size,
            "placeable_now": placed,
            "free_gpus": free,
            "needed_gpus": job.total_gpus,
        },
    )
