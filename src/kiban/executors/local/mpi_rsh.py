"""``mpirun``'s remote-start program on the local executor, in place of ssh.

``python -P -m kiban.executors.local.mpi_rsh HOST WORD...`` asks the worker agent of HOST
(``mpi_agent``) to run the words there, hands it this process's stdin, stdout and stderr, and
ends with the command's exit code, as ``ssh HOST WORD...`` would: 255 when the host cannot be
reached. If this process is stopped, the agent kills what it started.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

from kiban.executors.local.mpi_agent import Op, ProtocolError, agent_address, encode, peer_uid
from kiban.executors.local.mpi_replicas import SECRET_ENV

UNREACHABLE = 255
"""ssh's exit code when it cannot reach the host."""
CONNECT_SECONDS = 10.0


class AgentUnreachable(Exception):
    """No agent of this user listens for the host."""


def connect(secret: str, host: str, timeout: float | None = CONNECT_SECONDS) -> socket.socket:
    """A connection to the agent of ``host``, checked to run as this process's user."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(agent_address(secret, host))
        if peer_uid(sock) != os.geteuid():
            raise AgentUnreachable(f"the agent for {host} runs as another user")
    except OSError as exc:
        sock.close()
        raise AgentUnreachable(f"no MPI worker agent for {host}: {exc.strerror or exc}") from None
    except AgentUnreachable:
        sock.close()
        raise
    return sock


def read_answer(sock: socket.socket, buffer: bytearray) -> dict[str, Any] | None:
    """The agent's next answer; None when it closed the connection."""
    while b"\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            return None
        buffer.extend(data)
    end = buffer.index(b"\n")
    line = bytes(buffer[:end])
    del buffer[: end + 1]
    answer = json.loads(line)
    if not isinstance(answer, dict):
        raise ProtocolError("an answer is a JSON object")
    if "error" in answer and "exit" not in answer:
        raise ProtocolError(str(answer["error"]))
    return answer


def ask(secret: str, host: str, op: Op, timeout: float = CONNECT_SECONDS) -> dict[str, Any]:
    """Ping or stop the agent of ``host``; its answer."""
    with connect(secret, host, timeout) as sock:
        sock.sendall(encode({"op": op.value}))
        answer = read_answer(sock, bytearray())
    if answer is None:
        raise AgentUnreachable(f"the agent for {host} closed the connection")
    return answer


def run_remote(secret: str, host: str, words: list[str]) -> int:
    """Run ``words`` on ``host`` with this process's stdio; the exit code."""
    with connect(secret, host) as sock:
        sock.settimeout(None)
        request = encode({"op": Op.RUN.value, "command": words})
        socket.send_fds(sock, [request], [0, 1, 2])
        buffer = bytearray()
        while True:
            answer = read_answer(sock, buffer)
            if answer is None:
                print(f"kiban mpi_rsh: the agent for {host} went away", file=sys.stderr)
                return UNREACHABLE
            if "exit" in answer:
                return int(answer["exit"])


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -P -m kiban.executors.local.mpi_rsh HOST WORD...", file=sys.stderr)
        return UNREACHABLE
    secret = os.environ.get(SECRET_ENV)
    if not secret:
        print(f"kiban mpi_rsh: {SECRET_ENV} is not set (not under kiban's mpirun)", file=sys.stderr)
        return UNREACHABLE
    host, words = argv[0], [w for w in argv[1:]]
    try:
        return run_remote(secret, host, words)
    except (AgentUnreachable, ProtocolError, ValueError) as exc:
        print(f"kiban mpi_rsh: {exc}", file=sys.stderr)
        return UNREACHABLE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
