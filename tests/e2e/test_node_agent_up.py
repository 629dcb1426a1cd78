"""``kiban up`` runs the node agent for its local nodes and stops it with the server."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import psutil
import pytest
from e2e_support import KibanServer, StartKiban

from kiban.testing import eventually
from kiban.testing.health import node_reading, with_gpu

pytestmark = pytest.mark.e2e


def agent_processes(marker: str) -> list[psutil.Process]:
    """Running ``kiban node-agent`` processes whose arguments mention ``marker``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "node-agent" in cmdline and any(marker in arg for arg in cmdline):
            found.append(process)
    return found


def agent_address(server: KibanServer) -> str:
    def address() -> str | None:
        match = re.search(r"serving http://(\S+)/metrics", server.server_log.read_text())
        return match.group(1) if match else None

    return eventually(address, what="the node agent to serve", timeout=60)


def test_kiban_up_runs_the_agent_over_its_nodes(start_kiban: StartKiban, tmp_path: Path) -> None:
    readings = tmp_path / "readings"
    readings.mkdir()
    for name in ("node-0", "node-1"):
        (readings / f"{name}.json").write_text(node_reading(name, gpus=2).model_dump_json())
    server = start_kiban(
        nodes=2,
        gpus_per_node=2,
        extra_args=["--agent-readings-dir", str(readings), "--health-interval", "0.5"],
    )
    metrics = f"http://{agent_address(server)}/metrics"

    def status(node: str, check: str, value: str) -> bool:
        series = f'kiban_agent_check_status{{check="{check}",node="{node}",status="{value}"}}'
        return f"{series} 1.0" in httpx.get(metrics, timeout=5).text

    eventually(lambda: status("node-1", "GpuEcc", "False"), what="node-1 checked", timeout=30)
    text = httpx.get(metrics, timeout=5).text
    assert 'DCGM_FI_DEV_GPU_TEMP{Hostname="node-0"' in text
    # a fault injected through the seam shows at the next pass
    sick = with_gpu(node_reading("node-1", gpus=2), 1, ecc_volatile_uncorrectable=1)
    (readings / "node-1.json").write_text(sick.model_dump_json())
    eventually(lambda: status("node-1", "GpuEcc", "True"), what="node-1's ECC fault", timeout=30)
    assert status("node-0", "GpuEcc", "False")
    (agent,) = agent_processes(str(readings))
    assert "node-0=0,1" in agent.cmdline() and "node-1=0,1" in agent.cmdline()
    server.stop()
    agent.wait(timeout=10)  # stopped with the server
    assert not agent_processes(str(readings))


def test_no_node_agent(start_kiban: StartKiban, tmp_path: Path) -> None:
    readings = tmp_path / "none"
    readings.mkdir()
    server = start_kiban(
        nodes=1, extra_args=["--no-node-agent", "--agent-readings-dir", str(readings)]
    )
    assert server.running
    assert not agent_processes(str(readings))
