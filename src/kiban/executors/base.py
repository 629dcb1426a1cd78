"""The executor interface: report nodes, launch a placed job, observe it, stop it.

The seam every executor fills is ``Executor``; what only some can do is a capability of its
own Protocol (``LogSource``, ``RevisionAddresses``, ``CpuMeter``, ``CheckpointProbe``,
``NodeTaints``, ``Closing``), declared by each executor in its ``offers`` (None: it has no
such thing), never looked up by name. ``capabilities`` (the ``Capability`` flags) are what
submission checks: a job that needs one the executor lacks is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from kiban.domain.jobspec import JobSpec
from kiban.domain.notebook import NotebookRuntime
from kiban.executors.log_streams import Mark
from kiban.scheduler.decisions import ReplicaPlacement


class Capability(StrEnum):
    """Things an executor may or may not be able to do."""

    TORCHRUN = "torchrun"  # can launch replicas under torchrun
    MPI = "mpi"  # can run launcher: mpirun jobs (Open MPI here, or in the image)
    ADOPT = "adopt"  # can re-attach to replicas that outlived a control-plane restart
    CONTAINERS = "containers"  # runs replicas in containers: image, volumes, ports are honoured
    CPU_USAGE = "cpu_usage"  # offers a CpuMeter: CPU seconds a replica used (autoscaling on cpu)


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
    # The extended resources it advertises (nvidia.com/hostdev, hugepages-2Mi in bytes, ...).
    extended: Mapping[str, int] = field(default_factory=dict)
    # The machine's GPU indices behind the node's GPUs 0 .. gpus-1, where virtual nodes of one
    # machine each have GPUs of their own (an NCCL rank needs a GPU no other rank uses). Empty:
    # the node's GPU ids are the machine's own.
    gpu_devices: tuple[int, ...] = ()


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


CREDENTIAL_ENV = frozenset({"KIBAN_TOKEN", "JUPYTER_TOKEN"})
"""The names in ``api_env`` whose values are credentials (the job's API token, a notebook's
Jupyter token): an executor keeps them out of what others may read, e.g. a pod's spec."""


@dataclass(frozen=True)
class ReplicaRef:
    """Which replica, and the identity its executor gave it at launch: an opaque ``handle``
    only that executor reads (a pod's ``namespace/name/uid``, a process's pid and start
    time); None where none was recorded (the executor then looks in its own records)."""

    job_id: str
    attempt: int
    task: str
    index: int
    rank: int
    handle: str | None = None


@dataclass(frozen=True)
class LaunchedReplica:
    """A replica that was started: its rank, its ``handle`` (see ``ReplicaRef``), and the
    process id users are shown where it is a process on kiban's machine."""

    rank: int
    started_at: float
    handle: str | None = None
    pid: int | None = None


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


class LogSource(Protocol):
    """Capability: the replicas' logs (``kiban logs``)."""

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


class RevisionAddresses(Protocol):
    """Capability: an address of its own for each revision of an inference service that takes
    traffic (a Kubernetes Service, ``kbs-<revision>``)."""

    def publish_revision(self, tenant: str, service: str, revision: str, port: int) -> str:
        """Make (or keep) the address of one revision; the address."""
        ...

    def unpublish_revision(self, tenant: str, revision: str) -> None:
        """Remove a revision's address (gone already is fine)."""
        ...

    def published_revisions(self) -> dict[tuple[str, str], str]:
        """The revisions' addresses that exist now, by (tenant, revision)."""
        ...


class CpuMeter(Protocol):
    """Capability: the CPU a replica has used (autoscaling on ``scaleMetric: cpu``)."""

    def replica_cpu_seconds(self, replica: ReplicaRef) -> float | None:
        """CPU seconds a running replica has used since it started (all its processes), or
        None when it is gone."""
        ...


class CheckpointProbe(Protocol):
    """Capability: when a job last wrote a checkpoint (the newest checkpoint is what a
    preemption loses least of, and what settling records)."""

    def newest_checkpoint(self, job_id: str) -> float | None:
        """The modification time (Unix) of the newest file in the job's checkpoint directory,
        as its replicas see it; None while it has none."""
        ...


class NodeTaints(Protocol):
    """Capability: puts a taint on a node (the health rules' ``taint`` action)."""

    def taint_node(self, node: str, key: str, value: str, effect: str) -> None:
        """Add the taint to the node, or set its value if the node has that key and effect
        already; an exception says why it could not."""
        ...


class NotebookStorage(Protocol):
    """Capability: a notebook's persistent directory kept by the cluster (a volume claim)
    rather than under kiban's home, and how its server runs there."""

    def notebook_runtime(self, tenant: str, owner: str, name: str) -> NotebookRuntime:
        """Make (or find) the directory of one member's notebook; how its server runs. An
        exception says why it could not."""
        ...


class Closing(Protocol):
    """Capability: holds threads or connections, released by ``close`` when kiban stops."""

    def close(self) -> None:
        """Release them (the replicas run on, to be adopted by the next control plane)."""
        ...


@dataclass(frozen=True)
class Offers:
    """The capabilities an executor declares: each the object that provides it (usually the
    executor itself), or None where it has no such thing."""

    logs: LogSource | None = None
    revisions: RevisionAddresses | None = None
    cpu_meter: CpuMeter | None = None
    checkpoints: CheckpointProbe | None = None
    closing: Closing | None = None
    taints: NodeTaints | None = None
    notebooks: NotebookStorage | None = None


class NoLogs:
    """The logs of an executor that keeps none: every log is empty, its times unknown."""

    def read_log(self, job_id: str, rank: int, offset: int, limit: int) -> tuple[bytes, int]:
        return b"", offset

    def follow_log(self, job_id: str, rank: int, offset: int) -> Iterator[bytes] | None:
        return None

    def log_start(
        self, job_id: str, rank: int, *, tail_lines: int | None, since: float | None
    ) -> int | None:
        return None if since is not None else 0

    def log_times(self, job_id: str, rank: int, start: int, end: int) -> list[Mark] | None:
        return None


class Executor(Protocol):
    """Runs admitted jobs. Implementations must be safe to call from the control loop thread."""

    name: str
    capabilities: frozenset[Capability]
    launch_concurrency: int
    """How many ``launch`` calls may run at once, from as many threads (1: one at a time)."""
    offers: Offers
    """What it can do beyond running jobs (see ``Offers``)."""

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

    def pick_master_port(self) -> int:
        """The rendezvous port for a job's replica 0."""
        ...

    def replica_address(self, replica: ReplicaRef, port: int) -> str | None:
        """``host:port`` where the control plane reaches a replica listening on ``port`` (a
        service's model server), or None while it has no address yet."""
        ...


NO_LOGS = NoLogs()


def log_source(executor: Executor) -> LogSource:
    """The executor's logs; empty ones (``NoLogs``) where it keeps none."""
    return executor.offers.logs or NO_LOGS


def checkpoint_probe(executor: Executor) -> CheckpointProbe | None:
    """How the executor tells when a job last checkpointed; None where it cannot."""
    return executor.offers.checkpoints


def checkpoint_detection_unavailable(executor: Executor) -> str | None:
    """What the control plane reports once where the executor has no ``CheckpointProbe``
    (None where it has one)."""
    if checkpoint_probe(executor) is not None:
        return None
    return f"checkpoint detection unavailable on {executor.name}"


def job_limits(executor: Executor) -> list[str]:
    """What the executor cannot do for a job that has not ended, as ``kiban describe`` names
    it (empty where it offers all that a job counts on): its logs, and noticing the
    checkpoints written in ``$KIBAN_CHECKPOINT_DIR``."""
    limits = []
    if executor.offers.logs is None:
        limits.append(f"logs: not kept by the {executor.name} executor")
    if checkpoint_probe(executor) is None:
        limits.append(
            f"checkpoint probe: not offered by the {executor.name} executor; only checkpoints "
            "reported with kiban checkpoint count"
        )
    return limits
