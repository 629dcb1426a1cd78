"""The environment every replica gets, on any executor (as Volcano's pytorch plugin sets it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kiban.domain.jobspec import TaskSpec
from kiban.scheduler.decisions import ReplicaPlacement


def replica_environment(
    *,
    job_id: str,
    job_name: str,
    attempt: int,
    task: TaskSpec,
    placement: ReplicaPlacement,
    world_size: int,
    master_addr: str,
    master_port: int,
    checkpoint_dir: str,
    index_env: Sequence[str] = (),
    api_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The job's variables for one replica, on top of the task's own ``env``.

    Each name in ``index_env`` is set to the replica's index within its task; ``api_env``
    (``KIBAN_URL``, ``KIBAN_TOKEN``) says how to reach kiban's API as the job itself.

    A replica without GPUs sees none: ``CUDA_VISIBLE_DEVICES`` is empty and
    ``NVIDIA_VISIBLE_DEVICES=none``; one with GPUs sees only its own.
    """
    gpus = ",".join(str(i) for i in placement.gpu_ids)
    env = dict(task.env)
    env.update(
        {
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "WORLD_SIZE": str(world_size),
            "RANK": str(placement.rank),
            "KIBAN_JOB_ID": job_id,
            "KIBAN_JOB_NAME": job_name,
            "KIBAN_ATTEMPT": str(attempt),
            "KIBAN_TASK": placement.task,
            "KIBAN_REPLICA_INDEX": str(placement.index),
            "KIBAN_NODE": placement.node,
            "KIBAN_CHECKPOINT_DIR": checkpoint_dir,
            "CUDA_VISIBLE_DEVICES": gpus,
            "NVIDIA_VISIBLE_DEVICES": gpus or "none",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(dict.fromkeys(index_env, str(placement.index)))
    env.update(api_env or {})
    return env


def replica_command(
    *,
    launcher: str,
    task: TaskSpec,
    placement: ReplicaPlacement,
    world_size: int,
    master_addr: str,
    master_port: int,
    python: str,
) -> list[str]:
    """The argument list to run: the task's command and args, under torchrun when asked."""
    if launcher != "torchrun":
        return [*task.command, *task.args]
    nproc = task.nproc_per_node or max(len(placement.gpu_ids), 1)
    return [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={world_size}",
        f"--nproc_per_node={nproc}",
        f"--node_rank={placement.rank}",
        f"--master_addr={master_addr}",
        f"--master_port={master_port}",
        "--no-python",
        *task.command,
        *task.args,
    ]
