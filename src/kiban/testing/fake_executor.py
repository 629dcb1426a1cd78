"""An executor that runs nothing: tests and simulations say when each replica ends."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kiban.clock import Clock, SystemClock
from kiban.executors.base import (
    Capability,
    LaunchedReplica,
    LaunchError,
    LaunchRequest,
    NodeInfo,
    Observation,
    Offers,
    ReplicaRef,
)
from kiban.executors.checkpoints import newest_file_mtime
from kiban.executors.log_streams import (
    Mark,
    line_start_from,
    marks_between,
    offset_since,
    skip_bytes,
    tail_start,
)


@dataclass
class FakeReplica:
    """A pretend replica: running until ``finish`` is called, with the request that made it."""

    request: LaunchRequest
    rank: int
    pid: int
    exit_code: int | None = None
    exit_message: str = ""
    """What the executor says of its end (as a pod's status does: "container cannot start...")."""
    waiting: str = ""
    """What it waits for while running, as tests say (as a pod waits for its image)."""
    stop_requests: list[bool] = field(default_factory=list)  # force flag of each stop call
    log: bytearray = field(default_factory=bytearray)
    log_marks: list[Mark] | None = None
    """When parts of ``log`` were written, as tests say (``FakeExecutor.write_log``); None: not
    known, as for a log extended directly."""
    ignores_sigterm: bool = False
    cpu_seconds: float = 0.0
    """CPU it has used, as tests say (``FakeExecutor.burn``)."""


class FakeExecutor:
    """Keeps replicas in memory. ``finish(job, rank, code)`` ends one; stops end them too.

    A SIGTERM-like stop ends a replica with code 143 unless it was told to ignore it;
    a forced stop always ends it with 137. It offers logs (as tests write them), checkpoints
    (files under ``checkpoints_root``) and, with ``Capability.CPU_USAGE``, a CPU meter; tests
    give it more by replacing ``offers``.
    """

    name = "fake"

    def __init__(
        self,
        nodes: list[NodeInfo],
        clock: Clock | None = None,
        capabilities: frozenset[Capability] | None = None,
    ) -> None:
        self._nodes = list(nodes)
        self._clock = clock or SystemClock()
        self.capabilities = capabilities if capabilities is not None else frozenset(Capability)
        self.launch_concurrency = 1  # deterministic: launches in the order of the decisions
        self.replicas: dict[tuple[str, int, int], FakeReplica] = {}
        # (job, rank): a live log's chunks from its start; an exception breaks the stream there
        self.streams: dict[tuple[str, int], list[bytes | Exception]] = {}
        self.follows: list[tuple[str, int, int]] = []  # (job, rank, offset) of each follow_log
        self.launches: list[LaunchRequest] = []
        self.fail_next_launch: str | None = None
        self._next_pid = 1000
        self._next_port = 30000
        self.checkpoints_root = "/checkpoints"  # point it at a real directory to test checkpoints
        self.offers = Offers(
            logs=self,
            cpu_meter=self if Capability.CPU_USAGE in self.capabilities else None,
            checkpoints=self,
        )

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def set_nodes(self, nodes: list[NodeInfo]) -> None:
        self._nodes = list(nodes)

    def checkpoint_dir(self, job_id: str) -> str:
        return f"{self.checkpoints_root}/{job_id}"

    def newest_checkpoint(self, job_id: str) -> float | None:
        return newest_file_mtime(self.checkpoint_dir(job_id))

    def pick_master_port(self) -> int:
        self._next_port += 1
        return self._next_port

    def replica_address(self, replica: ReplicaRef, port: int) -> str | None:
        """A made-up host per job (replicas with containers all listen on one port)."""
        return f"{replica.job_id}.fake:{port}"

    def replica_cpu_seconds(self, replica: ReplicaRef) -> float | None:
        fake = self.replicas.get((replica.job_id, replica.attempt, replica.rank))
        return None if fake is None or fake.exit_code is not None else fake.cpu_seconds

    def burn(self, cores: float, seconds: float, job_id: str | None = None) -> None:
        """The running replicas (of ``job_id`` when given) share ``cores`` of work evenly for
        ``seconds``: a fixed load spread over however many there are."""
        running = self.running(job_id)
        for replica in running:
            replica.cpu_seconds += cores * seconds / len(running)

    def launch(self, request: LaunchRequest) -> list[LaunchedReplica]:
        if self.fail_next_launch is not None:
            message, self.fail_next_launch = self.fail_next_launch, None
            raise LaunchError(message)
        self.launches.append(request)
        launched = []
        for placement in request.placements:
            self._next_pid += 1
            replica = FakeReplica(request, placement.rank, self._next_pid)
            self.replicas[(request.job_id, request.attempt, placement.rank)] = replica
            launched.append(
                LaunchedReplica(
                    placement.rank, self._clock.now(), f"fake/{self._next_pid}", self._next_pid
                )
            )
        return launched

    def _get(self, job_id: str, attempt: int, rank: int) -> FakeReplica:
        return self.replicas[(job_id, attempt, rank)]

    def finish(
        self,
        job_id: str,
        rank: int,
        exit_code: int = 0,
        attempt: int | None = None,
        message: str = "",
    ) -> None:
        """End one replica with ``exit_code`` (of the newest attempt unless told)."""
        if attempt is None:
            attempt = max(a for (j, a, _r) in self.replicas if j == job_id)
        replica = self._get(job_id, attempt, rank)
        replica.exit_code, replica.exit_message = exit_code, message

    def finish_all(self, job_id: str, exit_code: int = 0, message: str = "") -> None:
        attempt = max(a for (j, a, _r) in self.replicas if j == job_id)
        for j, a, rank in list(self.replicas):
            if j == job_id and a == attempt:
                self.finish(job_id, rank, exit_code, attempt, message)

    def running(self, job_id: str | None = None) -> list[FakeReplica]:
        return [
            r
            for (j, _a, _r), r in self.replicas.items()
            if r.exit_code is None and (job_id is None or j == job_id)
        ]

    def observe(self, replica: ReplicaRef) -> Observation:
        fake = self.replicas.get((replica.job_id, replica.attempt, replica.rank))
        if fake is None:
            return Observation(running=False, lost=True, message="unknown to the fake executor")
        if fake.exit_code is None:
            return Observation(running=True, message=fake.waiting)
        return Observation(running=False, exit_code=fake.exit_code, message=fake.exit_message)

    def stop(self, replica: ReplicaRef, *, force: bool) -> None:
        fake = self.replicas.get((replica.job_id, replica.attempt, replica.rank))
        if fake is None:
            return
        fake.stop_requests.append(force)
        if fake.exit_code is None and (force or not fake.ignores_sigterm):
            fake.exit_code = 137 if force else 143

    def abandon(self, job_id: str, attempt: int) -> None:
        for (j, a, _rank), replica in self.replicas.items():
            if j == job_id and a == attempt and replica.exit_code is None:
                replica.stop_requests.append(True)
                replica.exit_code = 137

    def attempts(self) -> set[tuple[str, int]]:
        """The attempts with a replica still running."""
        return {(j, a) for (j, a, _r), r in self.replicas.items() if r.exit_code is None}

    def read_log(self, job_id: str, rank: int, offset: int, limit: int) -> tuple[bytes, int]:
        attempts = [a for (j, a, r) in self.replicas if j == job_id and r == rank]
        if not attempts:
            return b"", offset
        data = bytes(self._get(job_id, max(attempts), rank).log[offset : offset + limit])
        return data, offset + len(data)

    def write_log(self, job_id: str, rank: int, data: bytes, at: float) -> None:
        """Append ``data`` to the newest replica of ``rank``'s log, written at ``at``."""
        replica = self._newest(job_id, rank)
        assert replica is not None, f"no replica of {job_id} rank {rank}"
        if replica.log_marks is None:
            replica.log_marks = []
        replica.log_marks.append((len(replica.log), at))
        replica.log.extend(data)

    def _newest(self, job_id: str, rank: int) -> FakeReplica | None:
        attempts = [a for (j, a, r) in self.replicas if j == job_id and r == rank]
        return self._get(job_id, max(attempts), rank) if attempts else None

    def log_start(
        self, job_id: str, rank: int, *, tail_lines: int | None, since: float | None
    ) -> int | None:
        replica = self._newest(job_id, rank)
        log = bytes(replica.log) if replica is not None else b""

        def read(offset: int, limit: int) -> bytes:
            return log[offset : offset + limit]

        start = 0 if tail_lines is None else tail_start(read, len(log), tail_lines)
        if since is not None:
            if replica is None or replica.log_marks is None:
                return None
            found = offset_since(replica.log_marks, since, len(log))
            start = max(start, line_start_from(read, found))
        return start

    def log_times(self, job_id: str, rank: int, start: int, end: int) -> list[Mark] | None:
        replica = self._newest(job_id, rank)
        if replica is None or replica.log_marks is None:
            return None
        return marks_between(replica.log_marks, start, end)

    def follow_log(self, job_id: str, rank: int, offset: int) -> Iterator[bytes] | None:
        """The chunks a test put in ``streams`` for this replica, from ``offset``; else None."""
        chunks = self.streams.get((job_id, rank))
        if chunks is None:
            return None
        self.follows.append((job_id, rank, offset))
        return skip_bytes(_played(list(chunks)), offset)


def _played(chunks: list[bytes | Exception]) -> Iterator[bytes]:
    for chunk in chunks:
        if isinstance(chunk, Exception):
            raise chunk
        yield chunk
