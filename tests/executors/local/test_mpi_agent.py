"""The worker agent of local MPI jobs and its callers: the protocol, run as ssh would, and
nothing left running when the caller goes."""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from kiban.executors.local.mpi_agent import (
    Op,
    ProtocolError,
    WorkerAgent,
    agent_address,
    command_environment,
    parse_request,
)
from kiban.executors.local.mpi_launcher import wait_for_agents
from kiban.executors.local.mpi_replicas import HOSTS_ENV, SECRET_ENV
from kiban.executors.local.mpi_rsh import AgentUnreachable, ask, connect
from kiban.testing import eventually

HOST = "job-worker-0"


@pytest.mark.parametrize(
    ("line", "op", "command"),
    [
        (b'{"op": "ping"}', Op.PING, []),
        (b'{"op": "exit"}', Op.EXIT, []),
        (b'{"op": "run", "command": ["orted", "-mca", "x"]}', Op.RUN, ["orted", "-mca", "x"]),
    ],
)
def test_requests_read(line: bytes, op: Op, command: list[str]) -> None:
    assert parse_request(line) == (op, command)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "JSON object"),
        (b'{"op": "shell"}', "unknown op 'shell'"),
        (b'{"op": "run"}', "non-empty list"),
        (b'{"op": "run", "command": "orted -mca"}', "non-empty list"),
        (b'{"op": "run", "command": ["a\\u0000b"]}', "without NUL"),
        (b'{"op": "run", "command": [1]}', "list of strings"),
    ],
)
def test_bad_requests_are_refused_saying_why(line: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_request(line)


def test_the_address_fits_a_unix_socket_whatever_the_host_name() -> None:
    address = agent_address("f" * 24, "a" * 63 + "-worker-" + "9" * 5)
    assert address.startswith("\0") and len(address.encode()) <= 107
    assert agent_address("s", "h-0") != agent_address("s", "h-1")
    assert agent_address("s", "h-0") != agent_address("t", "h-0")


@pytest.fixture
def agent() -> Iterator[WorkerAgent]:
    running = WorkerAgent(secrets.token_hex(8), HOST)
    thread = running.serve_in_thread()
    yield running
    running.terminate()
    thread.join(timeout=10)


def rsh(agent: WorkerAgent, *words: str, host: str = HOST) -> subprocess.Popen[str]:
    """``mpi_rsh HOST WORDS...`` as mpirun starts it."""
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "kiban.executors.local.mpi_rsh", host, *words],
        env={**os.environ, SECRET_ENV: agent.secret},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ping_names_the_host(agent: WorkerAgent) -> None:
    assert ask(agent.secret, HOST, Op.PING) == {"ok": True, "host": HOST}


def test_a_command_runs_as_over_ssh_with_the_callers_output_and_exit_code(
    agent: WorkerAgent,
) -> None:
    # OpenMPI quotes values holding ';' for the remote shell, as ssh hands them to one
    done = rsh(agent, "printf", "'%s|%s'", '"1234.0;tcp://127.0.0.1:1"', "x;", "exit", "3")
    out, err = done.communicate(timeout=30)
    assert (done.returncode, out) == (3, "1234.0;tcp://127.0.0.1:1|x"), err


def test_an_unknown_host_ends_as_ssh_does(agent: WorkerAgent) -> None:
    done = rsh(agent, "true", host="job-worker-9")
    _, err = done.communicate(timeout=30)
    assert done.returncode == 255
    assert "no MPI worker agent for job-worker-9" in err


def test_when_the_caller_goes_what_it_started_is_killed(agent: WorkerAgent) -> None:
    caller = rsh(agent, "echo", "$$;", "exec", "sleep", "600")
    assert caller.stdout is not None
    started = psutil.Process(int(caller.stdout.readline()))
    assert started.ppid() == os.getpid()  # the agent's child (the agent runs in this process)
    eventually(lambda: started.name() == "sleep", what="the shell to exec sleep", timeout=10)
    caller.send_signal(signal.SIGKILL)  # mpirun stopped: its remote start goes with it
    caller.wait(timeout=10)
    eventually(
        lambda: not started.is_running() or started.status() == psutil.STATUS_ZOMBIE,
        what="the remote command to be killed",
        timeout=10,
    )


def test_a_caller_gone_with_the_answer_unread_still_kills_what_it_started(
    agent: WorkerAgent,
) -> None:
    # A caller killed before it read the agent's first answer: its socket is reset, not
    # closed (the agent's read fails instead of reading the end), which must count as gone.
    out_read, out_write = os.pipe()
    with os.fdopen(out_read) as out:
        sock = connect(agent.secret, HOST)
        request = json.dumps({"op": "run", "command": ["echo", "$$;", "exec", "sleep", "600"]})
        socket.send_fds(sock, [request.encode() + b"\n"], [out_write, out_write, out_write])
        os.close(out_write)
        started = psutil.Process(int(out.readline()))
        eventually(lambda: started.name() == "sleep", what="the shell to exec sleep", timeout=10)
        readable, _, _ = select.select([sock], [], [], 10)
        assert readable  # the agent's answer (the pid) waits unread in our socket
        sock.close()
    eventually(
        lambda: not started.is_running() or started.status() == psutil.STATUS_ZOMBIE,
        what="the remote command to be killed",
        timeout=10,
    )


def test_each_agent_gives_open_mpi_a_session_base_of_its_own_removed_when_it_ends() -> None:
    # Every virtual node runs on this machine under its host name: daemons of two workers
    # sharing /tmp/ompi.HOST.UID/ raced to create it ("File exists", seen in CI).
    secret = secrets.token_hex(8)
    agents = [WorkerAgent(secret, f"job-worker-{i}") for i in range(2)]
    threads = [a.serve_in_thread() for a in agents]
    bases = []
    try:
        for a in agents:
            done = rsh(
                a, "echo", "$OMPI_MCA_orte_tmpdir_base", "$PRTE_MCA_prte_tmpdir_base", host=a.host
            )
            out, err = done.communicate(timeout=30)
            orte, prte = out.split()
            assert orte == prte and os.path.isdir(orte), err
            bases.append(orte)
        assert bases[0] != bases[1]
    finally:
        for a, thread in zip(agents, threads, strict=True):
            a.terminate()
            thread.join(timeout=10)
    assert not any(os.path.exists(base) for base in bases)


def test_a_session_base_the_replica_chose_is_kept() -> None:
    env = command_environment({"OMPI_MCA_orte_tmpdir_base": "/scratch", "PATH": "/bin"}, "/t")
    assert env == {
        "OMPI_MCA_orte_tmpdir_base": "/scratch",
        "PRTE_MCA_prte_tmpdir_base": "/t",
        "PATH": "/bin",
    }


def test_exit_ends_the_agent(agent: WorkerAgent) -> None:
    assert ask(agent.secret, HOST, Op.EXIT) == {"ok": True}
    eventually(
        lambda: wait_for_agents(agent.secret, [HOST], 0) == [HOST],
        what="the agent to stop listening",
        timeout=10,
    )
    with pytest.raises(AgentUnreachable):
        ask(agent.secret, HOST, Op.PING)


def test_the_launcher_waits_for_every_agent_and_names_the_silent(agent: WorkerAgent) -> None:
    assert wait_for_agents(agent.secret, [HOST], timeout=5) == []
    assert wait_for_agents(agent.secret, [HOST, "job-worker-1"], timeout=0.3) == ["job-worker-1"]


def test_a_launcher_whose_workers_never_come_up_fails_saying_which() -> None:
    env = {
        **os.environ,
        SECRET_ENV: secrets.token_hex(8),
        HOSTS_ENV: "job-worker-0,job-worker-1",
        "KIBAN_MPI_START_TIMEOUT": "0.3",
    }
    done = subprocess.run(
        [sys.executable, "-P", "-m", "kiban.executors.local.mpi_launcher", "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "MPI workers not up after 0.3s: job-worker-0, job-worker-1" in done.stderr
