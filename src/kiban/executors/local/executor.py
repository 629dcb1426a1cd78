"""Replicas as process groups on this machine, each with its environment, directory and log.

Layout under the kiban home::

    jobs/<job>/rank-<R>.log                 the replica's output, appended across attempts
    jobs/<job>/rank-<R>.times               when each part of it was written (log_index)
    jobs/<job>/attempt-<A>/rank-<R>.pid     "pid start-time", written right after the launch
                                            (the replica's handle holds the same)
    jobs/<job>/attempt-<A>/rank-<R>.exit    exit code, written by the shim when the command ends
    jobs/<job>/attempt-<A>/rank-<R>.sock    a Unix socket kiban's model server listens on too
    jobs/<job>/attempt-<A>/mpi/             an MPI job's hostfile and remote-start script
                                            (``mpi_replicas``; isolated: run/<job>/mpi-<A>/)
    checkpoints/<job>/                      KIBAN_CHECKPOINT_DIR, kept across attempts

With ``isolation`` (kiban runs as root) each replica's command runs as its tenant's user, and
a few directories more are that user's (see ``isolation``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil

from kiban.clock import Clock, SystemClock
from kiban.domain.service_replica import SERVICE_LABEL
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
from kiban.executors.environment import replica_command, replica_environment
from kiban.executors.local.hosts_files import write_hosts_files
from kiban.executors.local.isolation import JOB_UMASK, Isolation, TenantRun
from kiban.executors.local.log_index import INDEX_FD_ENV, LogMarks, marks_path
from kiban.executors.local.mpi_replicas import MpiRun
from kiban.executors.local.process_tree import kill_descendants
from kiban.executors.local.reaper import Reaper
from kiban.executors.log_streams import Mark, line_start_from, tail_start
from kiban.serving.runtime.options import HOST_ENV, SOCKET_ENV

logger = logging.getLogger("kiban.executors.local")

JOB_ID = re.compile(r"^[a-z0-9][-a-z0-9]{0,79}$")
SHIM = ("-P", "-m", "kiban.executors.local.shim")
"""How the shim starts: ``-P``, not searching the working directory (the job's) for modules."""
NOT_INHERITED = frozenset({"KIBAN_TOKEN", "KIBAN_URL", HOST_ENV, SOCKET_ENV})
"""Variables of the server's environment its replicas do not get: its own credentials, and
where a replica listens, which kiban decides per replica (a model server on this machine binds
loopback, whatever the shell that started kiban said)."""
MAX_SOCKET_PATH = 107
"""Bytes in a Unix socket's path at most (Linux's ``sun_path`` less its final NUL)."""


def safe_job_dir(root: Path, job_id: str) -> Path:
    """The directory of ``job_id`` under ``root``; refuses ids that could escape it."""
    if not JOB_ID.match(job_id):
        raise ValueError(f"invalid job id {job_id!r}")
    path = (root / job_id).resolve()
    if path.parent != root.resolve():
        raise ValueError(f"invalid job id {job_id!r}")
    return path


def write_private(path: Path, text: str) -> None:
    """Write ``path`` readable by its owner alone, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def process_handle(pid: int, start_time: float) -> str:
    """A replica's handle: its shim's pid and that process's start time (so that a reused pid
    is told apart), as in its pid file."""
    return f"{pid} {start_time!r}"


def parse_process_handle(text: str) -> tuple[int, float] | None:
    """(pid, start time) of a handle or a pid file's text; None when it is neither."""
    try:
        pid_text, start_text = text.split()
        return int(pid_text), float(start_text)
    except ValueError:
        return None


def process_identity(pid: int) -> float | None:
    """The start time of a live, non-zombie process, or None."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


class LocalExecutor:
    """Runs each replica of a job as its own process group under a small exit-recording shim."""

    name = "local"

    def __init__(
        self,
        home: Path,
        nodes: list[NodeInfo],
        clock: Clock | None = None,
        isolation: Isolation | None = None,
    ) -> None:
        self.home = home
        self.jobs_root = home / "jobs"
        self.checkpoints_root = home / "checkpoints"
        self.jobs_root.mkdir(parents=True, exist_ok=True)
        self.checkpoints_root.mkdir(parents=True, exist_ok=True)
        self.isolation = isolation
        """Set (kiban runs as root): each replica runs as its tenant's user."""
        if isolation is not None:
            isolation.prepare()
        self._nodes = list(nodes)
        self._clock = clock or SystemClock()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._reaper = Reaper(self._forget_child)
        caps = {Capability.ADOPT, Capability.CPU_USAGE}
        if importlib.util.find_spec("torch") is not None:
            caps.add(Capability.TORCHRUN)
        if shutil.which("mpirun") is not None and shutil.which("orted") is not None:
            caps.add(Capability.MPI)  # Open MPI's launcher and daemon, as jobs will find them
        self.capabilities = frozenset(caps)
        self.launch_concurrency = 1  # spawning a process is quick and local: one at a time
        self.offers = Offers(logs=self, cpu_meter=self, checkpoints=self, closing=self)

    # -- nodes -----------------------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def _own_devices(self, node: str, gpu_ids: Sequence[int]) -> dict[str, str]:
        """The machine's GPUs behind a replica's GPU ids where its virtual node has GPUs of its
        own (``NodeInfo.gpu_devices``); nothing to change otherwise."""
        info = next((n for n in self._nodes if n.name == node), None)
        if info is None or not info.gpu_devices or not gpu_ids:
            return {}
        devices = ",".join(str(info.gpu_devices[i]) for i in gpu_ids)
        return {"CUDA_VISIBLE_DEVICES": devices, "NVIDIA_VISIBLE_DEVICES": devices}

    def checkpoint_dir(self, job_id: str) -> str:
        return str(safe_job_dir(self.checkpoints_root, job_id))

    def newest_checkpoint(self, job_id: str) -> float | None:
        """The job's checkpoint directory is on this machine: its newest file's time, as the
        tenant's replicas wrote it."""
        return newest_file_mtime(self.checkpoint_dir(job_id))

    def pick_master_port(self) -> int:
        """A free TCP port on loopback for the job's rendezvous."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    def replica_address(self, replica: ReplicaRef, port: int) -> str | None:
        """Every replica runs on this machine: its Unix socket (``unix:/path``) when it listens
        on the one offered at launch (``$KIBAN_REPLICA_SOCKET``), else loopback TCP."""
        path = self._socket_path(replica.job_id, replica.attempt, replica.rank)
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                return f"unix:{path}"
        except OSError:
            pass
        # isolated, the replica's socket is in its user's run directory: kiban links to it
        isolation = self.isolation
        if (
            isolation is not None
            and path.parent.is_dir()
            and isolation.link_socket(replica.job_id, replica.attempt, replica.rank, path)
        ):
            return f"unix:{path}"
        return f"127.0.0.1:{port}"

    def replica_cpu_seconds(self, replica: ReplicaRef) -> float | None:
        """CPU seconds of the replica's shim and every process under it, with the children
        they have reaped; None once it is gone (or its pid names another process)."""
        identity = self._identity(replica)
        if identity is None or not self._alive(replica):
            return None
        try:
            root = psutil.Process(identity[0])
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return None
        total = 0.0
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.Error:  # ended between the listing and the read
                continue
            total += times.user + times.system + times.children_user + times.children_system
        return total

    def _socket_path(self, job_id: str, attempt: int, rank: int) -> Path:
        return safe_job_dir(self.jobs_root, job_id) / f"attempt-{attempt}" / f"rank-{rank}.sock"

    # -- launch ----------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> list[LaunchedReplica]:
        job_dir = safe_job_dir(self.jobs_root, request.job_id)
        attempt_dir = job_dir / f"attempt-{request.attempt}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        checkpoint_dir = self.checkpoint_dir(request.job_id)
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
        spec = request.spec
        working_dir = Path(spec.working_dir) if spec.working_dir else job_dir
        tasks = {t.name: t for t in spec.tasks}
        world_size = len(request.placements)
        base_env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        python_bin = str(Path(sys.executable).parent)
        base_env["PATH"] = python_bin + os.pathsep + base_env.get("PATH", "")
        tenant = None if self.isolation is None else TenantRun.of(self.isolation, request)
        if tenant is not None:
            tenant.isolation.give(Path(checkpoint_dir), tenant.user)
            if not spec.working_dir:
                working_dir = tenant.own("work", request.job_id)
            base_env.update(tenant.environment())
        if not working_dir.is_dir():
            raise LaunchError(f"working directory {working_dir} does not exist")
        if spec.launcher == "torchrun" and Capability.TORCHRUN not in self.capabilities:
            raise LaunchError("launcher torchrun needs PyTorch installed where kiban runs")
        mpi = None
        if spec.launcher == "mpirun":
            mpi = self._prepare_mpi(request, attempt_dir, tenant)
        hosts_env = write_hosts_files(request, attempt_dir, tenant) if spec.hosts_files else {}
        programs = []
        for i, task in enumerate(spec.tasks):
            env = {**base_env, **task.env}
            if mpi is not None and mpi.is_worker(task.name):  # sshd's place: not run here
                logger.info(
                    "job %s: MPI workers run kiban's agent in place of their command %s",
                    request.job_id,
                    task.command,
                )
            else:
                programs.append(
                    (task.command[0], self._check_program(task.command[0], working_dir, env))
                )
            ignored = task.container_fields()
            if ignored:
                logger.warning(
                    "job %s: the local executor ignores spec.tasks[%d] (%s) fields %s",
                    request.job_id,
                    i,
                    task.name,
                    ", ".join(ignored),
                )
        if tenant is not None:
            python_runs = spec.launcher in ("torchrun", "mpirun")
            tenant.check_reach(working_dir, programs, torchrun=python_runs)

        launched: list[LaunchedReplica] = []
        refs: list[ReplicaRef] = []
        try:
            for placement in request.placements:
                task = tasks[placement.task]
                env = dict(base_env)
                env.update(
                    replica_environment(
                        job_id=request.job_id,
                        job_name=request.job_name,
                        attempt=request.attempt,
                        task=task,
                        placement=placement,
                        world_size=world_size,
                        master_addr="127.0.0.1",
                        master_port=request.master_port,
                        checkpoint_dir=checkpoint_dir,
                        index_env=spec.index_env,
                        api_env=request.api_env,
                    )
                )
                env.update(hosts_env)
                env.update(self._own_devices(placement.node, placement.gpu_ids))
                if mpi is not None:
                    env.update(mpi.environment(placement.task, placement.index))
                # a service's replica gets a Unix socket to listen on too: the router and the
                # probes then use it, as it costs far less than loopback TCP (kiban's model
                # server listens there; a custom one need not)
                sock = self._socket_path(request.job_id, request.attempt, placement.rank)
                if tenant is not None and SERVICE_LABEL in request.labels:
                    tenant.own("run", request.job_id)  # the replica makes its socket there
                    sock = tenant.isolation.socket_path(
                        request.job_id, request.attempt, placement.rank
                    )
                if SERVICE_LABEL in request.labels and len(os.fsencode(sock)) <= MAX_SOCKET_PATH:
                    env[SOCKET_ENV] = str(sock)
                command = replica_command(
                    launcher=spec.launcher,
                    task=task,
                    placement=placement,
                    world_size=world_size,
                    master_addr="127.0.0.1",
                    master_port=request.master_port,
                    python=sys.executable,
                )
                if mpi is not None:
                    command = mpi.command(placement.task, command)
                exit_file = attempt_dir / f"rank-{placement.rank}.exit"
                exit_file.unlink(missing_ok=True)
                log_path = job_dir / f"rank-{placement.rank}.log"
                shim_env, run_as = env, []
                if tenant is not None:  # the shim, root, in kiban's environment: not the job's
                    env_file = attempt_dir / f"rank-{placement.rank}.env"
                    write_private(env_file, json.dumps(env))
                    shim_env = dict(os.environ)
                    run_as = ["--user", tenant.ids, "--env-file", str(env_file)]
                # the log holds the job's output only (kiban logs shows where each attempt ran),
                # written by the shim, which notes when beside it (in a file the job never holds)
                with open(log_path, "ab") as log, open(marks_path(log_path), "ab") as marks:
                    proc = subprocess.Popen(
                        [sys.executable, *SHIM, str(exit_file), *run_as, "--", *command],
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=working_dir,
                        env={**shim_env, INDEX_FD_ENV: str(marks.fileno())},
                        start_new_session=True,
                        close_fds=True,
                        pass_fds=(marks.fileno(),),
                        umask=-1 if tenant is None else JOB_UMASK,
                    )
                start_time = process_identity(proc.pid) or self._clock.now()
                handle = process_handle(proc.pid, start_time)
                (attempt_dir / f"rank-{placement.rank}.pid").write_text(f"{handle}\n")
                with self._lock:
                    self._children[proc.pid] = proc
                self._reaper.watch(proc)
                launched.append(
                    LaunchedReplica(placement.rank, self._clock.now(), handle, pid=proc.pid)
                )
                refs.append(
                    ReplicaRef(
                        request.job_id,
                        request.attempt,
                        placement.task,
                        placement.index,
                        placement.rank,
                        handle,
                    )
                )
        except (OSError, ValueError) as exc:  # ValueError: a value exec refuses (a NUL)
            for ref in refs:
                self.stop(ref, force=True)
            raise LaunchError(f"could not start a replica: {exc}") from exc
        return launched

    def _prepare_mpi(
        self, request: LaunchRequest, attempt_dir: Path, tenant: TenantRun | None
    ) -> MpiRun:
        """The attempt's MPI directory (hostfile, remote-start script), its user's."""
        if tenant is None:
            directory = attempt_dir / "mpi"
            directory.mkdir(exist_ok=True)
        else:
            directory = tenant.own("run", request.job_id) / f"mpi-{request.attempt}"
            directory.mkdir(exist_ok=True)
        try:
            run = MpiRun.prepare(
                request.spec,
                request.job_name,
                sys.executable,
                directory,
                as_root=tenant is None and os.geteuid() == 0,
            )
        except (OSError, ValueError) as exc:
            raise LaunchError(f"could not prepare the MPI job: {exc}") from exc
        if tenant is not None:
            for path in (directory, *directory.iterdir()):
                os.chown(path, tenant.user.uid, tenant.user.gid, follow_symlinks=False)
        return run

    def _check_program(self, program: str, working_dir: Path, env: dict[str, str]) -> Path:
        """The file ``program`` names (in ``working_dir``, or on the PATH), checked to be
        there and executable."""
        if "/" in program:
            path = working_dir / program
            if not path.exists():
                raise LaunchError(f"command not found: {program!r} (looked in {working_dir})")
            if not os.access(path, os.X_OK):
                raise LaunchError(f"command {program!r} is not executable")
            return path
        found = shutil.which(program, path=env.get("PATH"))
        if found is None:
            raise LaunchError(f"command not found: {program!r} is not on PATH")
        return Path(found)

    # -- observe and stop --------------------------------------------------------------------
    def _exit_file(self, ref: ReplicaRef) -> Path:
        job_dir = safe_job_dir(self.jobs_root, ref.job_id)
        return job_dir / f"attempt-{ref.attempt}" / f"rank-{ref.rank}.exit"

    def _read_exit(self, ref: ReplicaRef) -> Observation | None:
        path = self._exit_file(ref)
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            return None
        if not lines:
            return None
        return Observation(
            running=False, exit_code=int(lines[0]), message=lines[1] if len(lines) > 1 else ""
        )

    def _pid_file(self, job_id: str, attempt: int, rank: int) -> Path:
        return safe_job_dir(self.jobs_root, job_id) / f"attempt-{attempt}" / f"rank-{rank}.pid"

    def _identity(self, ref: ReplicaRef) -> tuple[int, float] | None:
        """(pid, start time) of the replica's shim: from its handle, or from its pid file when
        it has none (replicas recorded before handles held them); None: never started."""
        if ref.handle is not None:
            return parse_process_handle(ref.handle)
        try:
            text = self._pid_file(ref.job_id, ref.attempt, ref.rank).read_text()
        except OSError:
            return None
        return parse_process_handle(text)

    def _alive(self, ref: ReplicaRef) -> bool:
        identity = self._identity(ref)
        if identity is None:
            return False
        pid, start_time = identity
        with self._lock:
            child = self._children.get(pid)
        if child is not None:
            if child.poll() is None:
                return True
            with self._lock:
                self._children.pop(pid, None)
            return False
        started = process_identity(pid)
        return started is not None and abs(started - start_time) < 0.05

    def observe(self, replica: ReplicaRef) -> Observation:
        found = self._read_exit(replica)
        if found is not None:
            return found
        if self._alive(replica):
            return Observation(running=True)
        found = self._read_exit(replica)  # it may have finished between the two looks
        if found is not None:
            return found
        return Observation(
            running=False,
            lost=True,
            message="the replica's process ended without recording an exit code",
        )

    def _forget_child(self, pid: int) -> None:
        """The reaper has waited for this child: its pid may name another process from now."""
        with self._lock:
            self._children.pop(pid, None)

    def close(self) -> None:
        """Stop reaping (the server is stopping; its replicas run on, to be adopted)."""
        self._reaper.close()

    def _pid_reused(self, ref: ReplicaRef) -> bool:
        """Whether the replica's pid now names another process (so its group is long gone).

        The kernel does not hand out a pid while a process group of that id has members, so a
        live process with the pid but another start time means nothing of the replica is left,
        and signalling the group would hit a stranger (perhaps another job's replica).
        """
        identity = self._identity(ref)
        if identity is None:
            return False
        pid, start_time = identity
        with self._lock:
            if pid in self._children:
                return False
        started = process_identity(pid)
        return started is not None and abs(started - start_time) >= 0.05

    def stop(self, replica: ReplicaRef, *, force: bool) -> None:
        """Signal the replica's whole process group (SIGTERM, or SIGKILL with ``force``).

        With ``force`` the group is killed even when its leader (the shim) is gone, so that
        children it left behind die too; never when the pid has since been reused. Processes
        under the shim that moved to groups of their own (an MPI daemon's ranks) are killed
        with it.
        """
        identity = self._identity(replica)
        if identity is None or self._pid_reused(replica):
            return
        if not force and not self._alive(replica):
            return
        if force:  # first what left its group (OpenMPI's ranks each lead their own)
            kill_descendants(identity[0])
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(identity[0], signal.SIGKILL if force else signal.SIGTERM)

    def abandon(self, job_id: str, attempt: int) -> None:
        """Kill every replica of the attempt found in its pid files (written at each launch)."""
        attempt_dir = safe_job_dir(self.jobs_root, job_id) / f"attempt-{attempt}"
        for pid_file in sorted(attempt_dir.glob("rank-*.pid")):
            try:
                rank = int(pid_file.stem.removeprefix("rank-"))
            except ValueError:
                continue
            self.stop(ReplicaRef(job_id, attempt, "", 0, rank), force=True)

    def attempts(self) -> set[tuple[str, int]]:
        """None: a replica's process group ends with its stop (killed as a group), and a
        launch cut short is undone by ``abandon`` from its pid files."""
        return set()

    def group_alive(self, replica: ReplicaRef) -> bool:
        """Whether any process of the replica's group is left."""
        identity = self._identity(replica)
        if identity is None or self._pid_reused(replica):
            return False
        try:
            os.killpg(identity[0], 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    # -- logs ----------------------------------------------------------------------------------
    def read_log(self, job_id: str, rank: int, offset: int, limit: int) -> tuple[bytes, int]:
        path = safe_job_dir(self.jobs_root, job_id) / f"rank-{int(rank)}.log"
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                data = handle.read(limit)
        except FileNotFoundError:
            return b"", offset
        return data, offset + len(data)

    def follow_log(self, job_id: str, rank: int, offset: int) -> Iterator[bytes] | None:
        """None: a local log is a file, read at its end as cheaply as followed."""
        return None

    def _log_path(self, job_id: str, rank: int) -> Path:
        return safe_job_dir(self.jobs_root, job_id) / f"rank-{int(rank)}.log"

    def log_start(
        self, job_id: str, rank: int, *, tail_lines: int | None, since: float | None
    ) -> int | None:
        path = self._log_path(job_id, rank)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None if since is not None else 0
        start = 0

        def read(offset: int, limit: int) -> bytes:
            return self.read_log(job_id, rank, offset, limit)[0]

        if tail_lines is not None:
            start = tail_start(read, size, tail_lines)
        if since is not None:
            found = LogMarks(marks_path(path)).offset_since(since, size)
            if found is None:
                return None
            start = max(start, line_start_from(read, found))
        return start

    def log_times(self, job_id: str, rank: int, start: int, end: int) -> list[Mark] | None:
        return LogMarks(marks_path(self._log_path(job_id, rank))).between(start, end)
