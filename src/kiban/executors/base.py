"""The executor interface: report nodes, launch a placed job, observe it, stop it, read its logs.

Each executor declares its capabilities; a job that needs one it lacks is refused at submission.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from kiban.domain.jobspec import JobSpec
from kiban.executors.log_streams import Mark
from kiban.scheduler.decisions import ReplicaPlacement


class Capability(StrEnum):
    """Things an executor may or may not be able to do."""

    TORCHRUN = "torchrun"  # can launch replicas under torchrun
    ADOPT = "adopt"  # can re-attach to replicas that outlived a control-plane restart
    CONTAINERS = "containers"  # runs replicas in containers: image, volumes, ports are honoured
    CPU_USAGE = "cpu_usage"  # reports the CPU seconds a replica has used (autoscaling on cpu)


@dataclass(frozen=True)
class NodeInfo:
    """A node as an executor reports it."""

    name: str
    gpus: int
    cpu_millis: int
    memory: int
    labels: Mapping[str, str] = field(default_factory=dict)
    healthy: bool = True
    health_message: str = ""
    # GPUs held by work kiban did not start (other pods on a shared cluster): not free for kiban,
    # though still part of the node's capacity (so a job that needs the whole node is not refused).
    gpus_used_elsewhere: int = 0
    # Why a healthy node takes no new work (a cordon or taint in the executor's cluster); unlike
    # an unhealthy node, its running jobs stay. Empty: it takes new work.
    unschedulable: str = ""


@dataclass(frozen=True)
class LaunchRequest:
    """Everything needed to start one attempt of an admitted job."""

    job_id: str
    job_name: str
    tenant: str
    attempt: int
    spec: JobSpec
    placements: tuple[ReplicaPlacement, ...]
    master_port: int
    # The manifest's metadata.labels (a service replica's kiban.dev/service and /revision).
    labels: Mapping[str, str] = field(default_factory=dict)
    # How its replicas reach kiban's API (KIBAN_URL, and KIBAN_TOKEN: a token of the job's own).
    api_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplicaRef:
    """Which replica, and the identity recorded when it was launched.

    A process has a pid and its start time (so a reused pid is told apart); a replica elsewhere
    (a pod) has an opaque ``handle`` its executor made (e.g. ``namespace/name/uid``).
    """

    job_id: str
    attempt: int
    task: str
    index: int
    rank: int
    pid: int | None
    pid_start_time: float | None
    handle: str | None = None


@dataclass(frozen=True)
class LaunchedReplica:
    """A replica that was started: its rank and identity (a process's pid, or a handle)."""

    rank: int
    pid: int | None
    pid_start_time: float | None
    started_at: float
    handle: str | None = None


@dataclass(frozen=True)
class Observation:
    """What a replica is doing: still running, or exited (with a code), or lost (vanished).

    A running replica's ``message`` says what it waits for, when it waits (a container image
    being pulled).
    """

    running: bool
    exit_code: int | None = None
    lost: bool = False
    message: str = ""


EXIT_CANNOT_START = 128
"""The exit code of a replica whose container never started (its image, its configuration):
every replica made the same way fails the same way, so it is no crash worth retrying."""
CANNOT_START = "container cannot start"
"""How the message of such a replica begins."""


def cannot_start(message: str | None) -> bool:
    """Whether an exit's message says its container never started (see ``EXIT_CANNOT_START``)."""
    return message is not None and CANNOT_START in message


class LaunchError(Exception):
    """A job could not be started; the message says why (for its events)."""


class Executor(Protocol):
    """Runs admitted jobs. Implementations must be safe to call from the control loop thread."""

    name: str
    capabilities: frozenset[Capability]
    launch_concurrency: int
    """How many ``launch`` calls may run at once, from as many threads (1: one at a time)."""

    def nodes(self) -> list[NodeInfo]:
        """The nodes this executor offers."""
        ...

    def launch(self, request: LaunchRequest) -> list[LaunchedReplica]:
        """Start every placed replica; on failure stop what was started and raise LaunchError."""
        ...

    def observe(self, replica: ReplicaRef) -> Observation:
        """The current state of one replica (also of one that outlived a restart)."""
        ...

    def stop(self, replica: ReplicaRef, *, force: bool) -> None:
        """Ask a replica to stop (SIGTERM-like), or make it stop now with ``force``."""
        ...

    def abandon(self, job_id: str, attempt: int) -> None:
        """Stop at once whatever one attempt of a job started, recorded in the store or not."""
        ...

    def attempts(self) -> set[tuple[str, int]]:
        """The attempts (job id, attempt) whose replicas this executor finds still out there,
        by its own records rather than the store's (after a restart, the loop ``abandon``s
        those the store does not hold active)."""
        ...

    def read_log(self, job_id: str, rank: int, offset: int, limit: int) -> tuple[bytes, int]:
        """Log bytes of one replica from ``offset``; returns the bytes and the next offset."""
        ...

    def follow_log(self, job_id: str, rank: int, offset: int) -> Iterator[bytes] | None:
        """The replica's live log from ``offset`` on, as it is written, until its process ends
        (or the source goes quiet a while); None when this executor has no such stream for it
        (``kiban logs -f`` then polls ``read_log``). Blocking: iterate it off the event loop."""
        ...

    def log_start(
        self, job_id: str, rank: int, *, tail_lines: int | None, since: float | None
    ) -> int | None:
        """Where ``kiban logs`` begins in the replica's log: at its last ``tail_lines`` lines,
        at its first line written since ``since`` (Unix time), at the later of the two when
        both are asked, else at 0; None when ``since`` is asked of a log whose times this
        executor does not know."""
        ...

    def log_times(self, job_id: str, rank: int, start: int, end: int) -> list[Mark] | None:
        """When the bytes ``start`` to ``end`` of the replica's log were written: the marks
        that time them (``kiban.executors.log_streams``), or None when not known."""
        ...

    def checkpoint_dir(self, job_id: str) -> str:
        """The per-job directory that survives restarts of the job."""
        ...

    def pick_master_port(self) -> int:
        """The rendezvous port for a job's replica 0."""
        ...

    def replica_address(self, replica: ReplicaRef, port: int) -> str | None:
        """``host:port`` where the control plane reaches a replica listening on ``port`` (a
        service's model server), or None while it has no address yet."""
        ...

    def replica_cpu_seconds(self, replica: ReplicaRef) -> float | None:
        """CPU seconds a running replica has used since it started (all its processes), or
        None when it is gone or the executor cannot tell (no ``Capability.CPU_USAGE``)."""
        ...
