"""The launcher replica of a local MPI job: waits for every worker, runs ``mpirun``, ends them.

``python -P -m kiban.executors.local.mpi_launcher -- COMMAND...`` (the launcher task's own
command, e.g. ``mpirun -n 3 python3 train.py``):

1. with ``runLauncherAsWorker``, listens as its own host's agent too (a thread);
2. waits until the agent of each host in ``KIBAN_MPI_HOSTS`` answers: the launcher starts only
   once every worker is up. The wait is in this process, not in the control plane, so it holds
   across a restart of kiban;
3. runs the command as its child (same process group: a stop reaches it);
4. tells every worker agent to end (so the workers succeed), and ends with the command's code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from kiban.executors.local.mpi_agent import Op, WorkerAgent
from kiban.executors.local.mpi_replicas import HOST_ENV, HOSTS_ENV, SECRET_ENV
from kiban.executors.local.mpi_rsh import AgentUnreachable, ask

START_TIMEOUT_ENV = "KIBAN_MPI_START_TIMEOUT"
START_TIMEOUT = 600.0
"""Seconds the launcher waits for its workers' agents by default."""
POLL_SECONDS = 0.1


def wait_for_agents(secret: str, hosts: list[str], timeout: float) -> list[str]:
    """Wait until each host's agent answers; the hosts still silent at the deadline."""
    deadline = time.monotonic() + timeout
    waiting = list(hosts)
    while waiting:
        for host in list(waiting):
            with contextlib.suppress(AgentUnreachable, OSError, ValueError):
                if ask(secret, host, Op.PING, timeout=5.0).get("ok"):
                    waiting.remove(host)
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(POLL_SECONDS)
    return waiting


def end_agents(secret: str, hosts: list[str]) -> None:
    for host in hosts:
        with contextlib.suppress(AgentUnreachable, OSError, ValueError):
            ask(secret, host, Op.EXIT, timeout=5.0)


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--" or len(argv) < 2:
        usage = "usage: python -P -m kiban.executors.local.mpi_launcher -- COMMAND..."
        print(usage, file=sys.stderr)
        return 2
    command = argv[1:]
    secret = os.environ.get(SECRET_ENV, "")
    hosts = [h for h in os.environ.get(HOSTS_ENV, "").split(",") if h]
    if not secret or not hosts:
        print(f"kiban: {SECRET_ENV} and {HOSTS_ENV} must be set", file=sys.stderr)
        return 2
    own = os.environ.get(HOST_ENV, "")
    agent = WorkerAgent(secret, own) if own in hosts else None
    if agent is not None:
        agent.serve_in_thread()
    timeout = float(os.environ.get(START_TIMEOUT_ENV) or START_TIMEOUT)
    print(f"kiban: waiting for {len(hosts)} MPI worker(s)", file=sys.stderr, flush=True)
    silent = wait_for_agents(secret, hosts, timeout)
    if silent:
        print(
            f"kiban: MPI workers not up after {timeout:g}s: {', '.join(silent)}",
            file=sys.stderr,
            flush=True,
        )
        end_agents(secret, hosts)
        return 1
    print("kiban: every MPI worker is up; starting the launcher", file=sys.stderr, flush=True)
    # a stop signals the whole group: the command gets it too; this process outlives it
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        print(f"kiban: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        end_agents(secret, hosts)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    code = child.wait()
    end_agents(secret, hosts)
    if agent is not None:
        agent.terminate()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
