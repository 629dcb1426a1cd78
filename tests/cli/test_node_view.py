"""``kiban nodes`` says CPUs and memory as people read them; ``-o json`` keeps the raw numbers."""

from __future__ import annotations

from rich.console import Console

from kiban.cli import render


def test_a_kubernetes_nodes_memory_is_shown_in_binary_units() -> None:
    node = {
        "name": "gpu-1",
        "gpus": 8,
        "gpusInUse": 2,
        "cpuMillis": 95500,
        "memory": 24684092 * 1024,  # allocatable memory: 24684092Ki
        "cordoned": False,
        "healthy": True,
        "healthMessage": "",
        "labels": {},
    }
    console = Console(width=200, record=True)
    console.print(render.nodes_table([node]))
    row = console.export_text().splitlines()[1].split()
    assert row[:6] == ["gpu-1", "8", "2", "95.5", "23.5", "GiB"]
