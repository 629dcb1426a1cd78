"""Gang placement: put a job's replicas on nodes best-fit, all of the gang or none."""

from __future__ import annotations

from dataclasses import dataclass

from kiban.scheduler.capacity import CapacityOverlay
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.scheduler.snapshot import PendingJob, TaskDemand


@dataclass(frozen=True, slots=True)
class GangAttempt:
    """The placements found (committed only if ``fits``) and how many replicas could be placed."""

    placements: tuple[ReplicaPlacement, ...]
    placed: int
    fits: bool


def place_gang(job: PendingJob, overlay: CapacityOverlay) -> GangAttempt:
    """Place replicas in rank order; commit if at least the gang fits, else leave nothing behind."""
    placements: list[ReplicaPlacement] = []
    with overlay.transaction() as tx:
        rank = 0
        for task in job.tasks:
            for index in range(task.replicas):
                node = overlay.best_fit(task.gpu, task.cpu_millis, task.memory)
                if node is None:
                    break
                gpu_ids = overlay.take(node, task.gpu, task.cpu_millis, task.memory)
                placements.append(
                    ReplicaPlacement(
                        task=task.name,
                        index=index,
                        rank=rank,
                        node=node,
                        gpu_ids=gpu_ids,
                        cpu_millis=task.cpu_millis,
                        memory=task.memory,
                    )
                )
                rank += 1
            else:
                continue
            break
        if len(placements) >= job.gang_size:
            tx.commit()
            return GangAttempt(tuple(placements), len(placements), True)
    return GangAttempt((), len(placements), False)


def task_fits_some_node(task: TaskDemand, overlay: CapacityOverlay) -> tuple[bool, int]:
    """Whether an idle schedulable node could hold one replica, and how many unschedulable could."""
    fits = False
    blocked = 0
    for node in overlay.nodes.values():
        big_enough = (
            node.gpus >= task.gpu
            and node.cpu_millis >= task.cpu_millis
            and node.memory >= task.memory
        )
        if not big_enough:
            continue
        if node.schedulable:
            fits = True
        else:
            blocked += 1
    return fits, blocked
