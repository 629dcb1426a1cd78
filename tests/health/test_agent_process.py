"""The node agent kiban up runs: its arguments for the local executor's nodes."""

from __future__ import annotations

from pathlib import Path

from kiban.cli.node_agent import parse_node
from kiban.health.agent_process import AgentNode, agent_arguments


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
