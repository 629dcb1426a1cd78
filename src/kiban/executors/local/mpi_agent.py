"""The worker agent of a local MPI job: what sshd is to the MPI Operator's workers.

Each worker replica of a ``launcher: mpirun`` job runs this agent in place of its command. It
listens on a Unix socket (in the abstract namespace: no path to outgrow, nothing left on disk)
named by the attempt's secret and the replica's host name, and starts what ``mpirun`` asks of
that host (OpenMPI's ``orted``) through ``mpi_rsh``:

- as its own child, so in the replica's process group, with the replica's environment and
  GPUs (the agent's own: ``CUDA_VISIBLE_DEVICES``, ``KIBAN_*``, ``PATH`` with kiban's Python);
- with the caller's stdin, stdout and stderr (passed over the socket, ``SCM_RIGHTS``): its
  output reaches ``mpirun`` as over ssh, with nothing copied;
- through ``/bin/sh -c`` on the words joined with spaces, as sshd runs a remote command (the
  caller is ``mpirun``, already running as this job's user: nothing is gained by it);
- for as long as the caller stays: when the caller goes (``mpirun`` stopped), the child and
  everything under it is killed;
- with a scratch directory of the agent's own as Open MPI's session-directory base
  (``orte_tmpdir_base``, ``prte_tmpdir_base``), removed when the agent ends (a killed agent
  leaves it, empty once its daemons are gone, in the system's temp directory). Every virtual node
  of this machine has its host name, and Open MPI 4.1's daemons name their session directories
  by it (``/tmp/ompi.HOST.UID/jf.N/0``): two daemons creating the same one at once fail
  (``orte_session_dir failed``, "File exists", seen in CI). A value the replica set is kept.

Only a peer of the agent's own user is served (``SO_PEERCRED``), and the caller checks the
agent's the same way. The protocol is one JSON line each way, then the agent's answers::

    {"op": "ping"}                      -> {"ok": true, "host": HOST}
    {"op": "run", "command": [WORDS]}   -> {"pid": PID} ... {"exit": CODE}   (3 fds sent along)
    {"op": "exit"}                      -> {"ok": true}, then the agent stops its children, ends 0

``python -P -m kiban.executors.local.mpi_agent`` reads ``KIBAN_MPI_AGENTS`` (the attempt's
secret) and ``KIBAN_MPI_HOST`` (its host name) from its environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kiban.executors.local.mpi_replicas import HOST_ENV, SECRET_ENV
from kiban.executors.local.process_tree import kill_descendants, signal_descendants

SHELL = "/bin/sh"
MAX_LINE = 1 << 20
"""Bytes in one request line at most (an ``orted`` command line is a few KiB)."""
STDIO_FDS = 3
POLL_SECONDS = 0.2
EXIT_GRACE = 10.0
"""Seconds an agent asked to end waits for what it started to end by itself (``mpirun`` may
end before its daemons have)."""


class Op(StrEnum):
    """What a caller asks of an agent."""

    PING = "ping"
    RUN = "run"
    EXIT = "exit"


SESSION_BASE_VARIABLES = ("OMPI_MCA_orte_tmpdir_base", "PRTE_MCA_prte_tmpdir_base")
"""Where Open MPI's daemons (4.x, 5.x) put their session directories."""


def command_environment(environ: dict[str, str], scratch: str) -> dict[str, str]:
    """The environment a started command gets: the agent's, with ``scratch`` as Open MPI's
    session-directory base unless the replica chose one."""
    env = dict(environ)
    for name in SESSION_BASE_VARIABLES:
        env.setdefault(name, scratch)
    return env


class ProtocolError(Exception):
    """A request or answer the protocol does not allow (said to the peer, then dropped)."""


def agent_address(secret: str, host: str) -> str:
    """The agent's abstract socket name: the attempt's secret and a digest of the host name
    (a long host name still fits Linux's 107 bytes)."""
    digest = hashlib.sha256(host.encode()).hexdigest()[:24]
    return f"\0kiban-mpi/{secret}/{digest}"


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (from the kernel)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def parse_request(line: bytes) -> tuple[Op, list[str]]:
    """The operation of a request line and, for ``run``, the command's words."""
    try:
        message = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a request is a JSON object")
    try:
        op = Op(str(message.get("op")))
    except ValueError:
        raise ProtocolError(f"unknown op {message.get('op')!r}") from None
    command = message.get("command", [])
    if op is Op.RUN and (
        not isinstance(command, list)
        or not command
        or not all(isinstance(w, str) and "\0" not in w for w in command)
    ):
        raise ProtocolError("run needs command: a non-empty list of strings without NUL")
    return op, list(command) if op is Op.RUN else []


def shell_line(words: Sequence[str]) -> list[str]:
    """What runs for ``words``: the shell on them joined by spaces, as sshd does."""
    return [SHELL, "-c", " ".join(words)]


class LineReader:
    """Lines from a socket, with the file descriptors sent along the first one."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.fds: list[int] = []

    def line(self) -> bytes | None:
        """The next line (without its newline); None at the end of the stream."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE:
                raise ProtocolError("request line too long")
            data, fds, _flags, _addr = socket.recv_fds(self.sock, 65536, STDIO_FDS)
            self.fds.extend(fds)
            if not data:
                return None
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


@dataclass
class WorkerAgent:
    """Listens for one host of one attempt; ``serve`` returns once asked to exit."""

    secret: str
    host: str

    def __post_init__(self) -> None:
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(agent_address(self.secret, self.host))
        self._listener.listen(64)
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.RLock()  # also taken by terminate(), a signal handler
        self._done = threading.Event()
        self._graceful = True
        self._scratch = tempfile.TemporaryDirectory(prefix="kiban-mpi-")
        self.environment = command_environment(dict(os.environ), self._scratch.name)

    def serve(self) -> None:
        while not self._done.is_set():
            readable, _, _ = select.select([self._listener], [], [], POLL_SECONDS)
            if not readable:
                continue
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
        self._listener.close()
        deadline = time.monotonic() + (EXIT_GRACE if self._graceful else 0.0)
        while self._children and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS / 4)
        self.stop_children()
        self._scratch.cleanup()

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve, name="kiban-mpi-agent", daemon=True)
        thread.start()
        return thread

    def stop_children(self) -> None:
        """Kill each child started and everything under it."""
        with self._lock:
            children = list(self._children.values())
        for child in children:
            kill_descendants(child.pid)
            with contextlib.suppress(ProcessLookupError):
                child.kill()

    def terminate(self) -> None:
        """SIGTERM to each child's tree (the replica is being stopped), then stop serving."""
        with self._lock:
            children = list(self._children.values())
        for child in children:
            signal_descendants(child.pid, signal.SIGTERM)
            with contextlib.suppress(ProcessLookupError):
                child.terminate()
        self._graceful = False
        with self._lock:
            self._done.set()

    def _handle(self, conn: socket.socket) -> None:
        reader = LineReader(conn)
        try:
            with conn:
                if peer_uid(conn) != os.geteuid():
                    conn.sendall(encode({"error": "not this agent's user"}))
                    return
                line = reader.line()
                if line is None:
                    return
                op, command = parse_request(line)
                if op is Op.PING:
                    conn.sendall(encode({"ok": True, "host": self.host}))
                elif op is Op.EXIT:
                    with self._lock:
                        self._done.set()
                    conn.sendall(encode({"ok": True}))
                else:
                    self._run(conn, command, reader.fds)
        except ProtocolError as exc:
            with contextlib.suppress(OSError):
                conn.sendall(encode({"error": str(exc)}))
        except OSError:
            pass
        finally:
            for fd in reader.fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _run(self, conn: socket.socket, command: list[str], fds: list[int]) -> None:
        if len(fds) != STDIO_FDS:
            raise ProtocolError(f"run needs stdin, stdout and stderr sent along ({len(fds)} came)")
        with self._lock:  # started and noted together: an ending agent kills all it started
            if self._done.is_set():
                raise ProtocolError("the agent is ending")
            try:
                child = subprocess.Popen(
                    shell_line(command),
                    stdin=fds[0],
                    stdout=fds[1],
                    stderr=fds[2],
                    close_fds=True,
                    env=self.environment,
                )
            except OSError as exc:
                conn.sendall(encode({"exit": 127, "error": str(exc)}))
                return
            self._children[child.pid] = child
        for fd in fds:
            os.close(fd)
        fds.clear()
        try:
            conn.sendall(encode({"pid": child.pid}))
            while True:
                try:
                    code = child.wait(timeout=POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    pass
                readable, _, _ = select.select([conn], [], [], 0)
                if readable and caller_gone(conn):
                    kill_descendants(child.pid)
                    child.kill()
                    child.wait()
                    return
            conn.sendall(encode({"exit": code if code >= 0 else 128 - code}))
        finally:
            with self._lock:
                self._children.pop(child.pid, None)


def caller_gone(conn: socket.socket) -> bool:
    """Whether the caller of a run closed its end of ``conn`` (read as the end of the stream),
    or died with our answer unread in its socket (read as a reset)."""
    try:
        return not conn.recv(1, socket.MSG_PEEK)
    except OSError:
        return True


def main() -> int:
    secret, host = os.environ.get(SECRET_ENV), os.environ.get(HOST_ENV)
    if not secret or not host:
        print(f"kiban mpi agent: {SECRET_ENV} and {HOST_ENV} must be set", file=sys.stderr)
        return 2
    try:
        agent = WorkerAgent(secret, host)
    except OSError as exc:
        print(f"kiban mpi agent: cannot listen for {host}: {exc}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: agent.terminate())
    signal.signal(signal.SIGINT, lambda *_: agent.terminate())
    print(f"kiban: MPI worker agent for {host} is up", file=sys.stderr, flush=True)
    agent.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
