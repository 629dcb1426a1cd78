"""Trace records turned into the jobs a replay submits: shape, queue, priority, tie order.

A job of ``g`` GPUs runs as ``g / p`` replicas of ``p`` GPUs, ``p`` the largest divisor of
``g`` that fits the cluster's largest node (16 GPUs on 8-GPU nodes: 2 x 8), all one gang,
unless the trace gives its shape (``nodes`` x ``gpus_per_node``): then one replica per node
(``maxReplicasPerNode: 1``), as ``kiban run --nodes`` and Slurm's ``--nodes`` mean. Each
replica asks what a job manifest asks by default besides its GPUs (1 CPU, 1 GiB), which never
binds on the simulated nodes. On the synthetic cluster a multi-node gang prefers the smallest
topology level that holds it, as in the scheduler benchmark. Jobs submitted in the same second
are ordered by a shuffle seeded with ``--seed`` (the Philly file has one-second resolution and
unsorted rows).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.jobspec import Resources
from kiban.scheduler.snapshot import PendingJob, TaskDemand, TopologyRequest
from kiban.sim.cluster import SimCluster
from kiban.sim.topology import TOPOLOGY_LEVELS, split_gpus, topology_request
from kiban.sim.traces import TraceError, TraceRecord

REPLICA_CPU_MILLIS: int = Resources.model_fields["cpu"].default
REPLICA_MEMORY: int = Resources.model_fields["memory"].default


@dataclass(frozen=True, slots=True)
class SimJob:
    """A trace job ready to submit: its work, shape, queue and priority."""

    id: str
    sequence: int
    submit_s: float
    duration_s: float
    gpus: int
    tenant: str
    queue: str
    priority: int
    preempts: bool
    min_runtime_s: float
    task: TaskDemand
    topology: TopologyRequest | None = None
    time_limit_s: float | None = None
    member: str | None = None  # the trace's user, fair share's second level

    def pending(
        self,
        max_runtime: float | None,
        preempted_by: str | None = None,
        attained_service: float = 0.0,
    ) -> PendingJob:
        """The job as the core sees it waiting (again, after a preemption, with the GPU-seconds
        it has run so far)."""
        return PendingJob(
            id=self.id,
            queue=self.queue,
            priority=self.priority,
            submitted_at=self.submit_s,
            tasks=(self.task,),
            gang_size=self.task.replicas,
            tenant=self.tenant,
            sequence=self.sequence,
            max_runtime=max_runtime,
            topology=self.topology,
            preempts=self.preempts,
            preempted_by=preempted_by,
            attained_service=attained_service,
            member=self.member,
        )


def make_jobs(
    records: Sequence[TraceRecord],
    cluster: SimCluster,
    queue_of: Mapping[str, str],
    seed: int,
    source: str = "trace",
) -> list[SimJob]:
    """The records as jobs in submit order; ties in submit time shuffled by ``seed``."""
    rng = random.Random(f"{seed}:ties")
    keyed = sorted(records, key=lambda r: (r.submit_s, rng.random()))
    synthetic_topology = cluster.topology_levels == TOPOLOGY_LEVELS
    per_node = cluster.gpus_per_node
    jobs = []
    for sequence, record in enumerate(keyed):
        spread: int | None = None
        if record.nodes is not None and record.gpus_per_node is not None:
            replicas, per = record.nodes, record.gpus_per_node
            spread = 1 if replicas > 1 else None
        else:
            replicas, per = split_gpus(record.gpus, max(per_node, 1))
        value, preempts, min_runtime = _priority(cluster.policy, record, source)
        jobs.append(
            SimJob(
                id=f"job-{record.line}",
                sequence=sequence,
                submit_s=record.submit_s,
                duration_s=record.duration_s,
                gpus=record.gpus,
                tenant=record.tenant,
                queue=queue_of[record.tenant],
                priority=value,
                preempts=preempts,
                min_runtime_s=min_runtime,
                task=TaskDemand(
                    "worker",
                    replicas,
                    per,
                    REPLICA_CPU_MILLIS,
                    REPLICA_MEMORY,
                    max_per_node=spread,
                ),
                topology=topology_request(replicas) if synthetic_topology else None,
                time_limit_s=record.time_limit_s,
                member=record.user,
            )
        )
    return jobs


def _priority(policy: ClusterPolicy, record: TraceRecord, source: str) -> tuple[int, bool, float]:
    """A priority class name, or a number (PreemptLowerPriority if a class of that value has
    it), or nothing (the default class)."""
    written = record.priority
    if written is not None and not _is_number(written):
        level = policy.priority(written)
        if level is None:
            names = ", ".join(c.name for c in policy.priority_classes)
            raise TraceError(
                f"{source}, line {record.line}, column priority: unknown priority class "
                f"{written!r}; the classes are {names}"
            )
        return level.value, level.preempts, level.min_runtime_s
    if written is None:
        level = policy.priority(None)
        assert level is not None
        return level.value, level.preempts, level.min_runtime_s
    value = int(float(written))
    same = [c for c in policy.priority_classes if c.value == value]
    return value, any(c.preempts for c in same), max((c.min_runtime_s for c in same), default=0)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
