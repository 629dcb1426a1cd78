"""The node agent kiban up runs: its arguments for the local executor's nodes, and its end
with kiban up."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import psutil

from kiban.cli.node_agent import parse_node
from kiban.health.agent_process import AgentNode, agent_arguments
from kiban.testing import eventually


def test_each_node_reads_the_machines_first_gpus_as_its_replicas_see_them() -> None:
    nodes = [AgentNode.local("node-0", 2, physical=8), AgentNode.local("node-1", 2, physical=8)]
    args = agent_arguments(nodes, url="http://127.0.0.1:8470", interval_s=5)
    assert args == [
        "node-agent",
        "--interval",
        "5",
        "--url",
        "http://127.0.0.1:8470",
        "--node",
        "node-0=0,1",
        "--node",
        "node-1=0,1",
    ]
    assert parse_node("node-1=0,1") == ("node-1", [0, 1])


def test_virtual_gpus_beyond_the_machines_are_neither_read_nor_expected() -> None:
    assert AgentNode.local("node-0", 8, physical=1).gpus == (0,)
    assert AgentNode.local("node-0", 8, physical=0).gpus == ()
    assert parse_node("node-0=") == ("node-0", [])


def test_readings_from_a_directory_keep_every_gpu_of_the_node(tmp_path: Path) -> None:
    node = AgentNode.local("node-0", 4, physical=None)
    args = agent_arguments([node], url=None, interval_s=30, readings_dir=tmp_path)
    assert "--url" not in args
    assert args[-4:] == ["--node", "node-0=0,1,2,3", "--readings-dir", str(tmp_path)]


PARENT = """
import sys, time
from kiban.health.agent_process import AgentProcess, AgentNode, agent_arguments
arguments = agent_arguments([AgentNode("node-0", ())], url=None, interval_s=30,
                            readings_dir=__import__("pathlib").Path(sys.argv[1]))
agent = AgentProcess(arguments, None)
agent.start()
print(agent.process.pid, flush=True)
time.sleep(120)
"""


def test_the_agent_ends_with_a_parent_killed_with_9(tmp_path: Path) -> None:
    """kiban up's agent must not outlive it: killed with -9, the parent cannot stop it, so the
    agent stops by itself when the pipe on its standard input closes."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        agent = psutil.Process(int(parent.stdout.readline()))
        assert agent.is_running()
        parent.kill()
        parent.wait()

        def agent_gone() -> bool:
            try:
                return agent.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        eventually(agent_gone, timeout=30, what="the orphaned agent to stop")
    finally:
        parent.kill()
        with contextlib.suppress(psutil.NoSuchProcess):
            agent.kill()
