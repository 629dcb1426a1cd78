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


def test_extended_resources_get_a_column_only_where_a_node_advertises_some() -> None:
    base = {
        "gpus": 8,
        "gpusInUse": 0,
        "cpuMillis": 8000,
        "memory": 2**35,
        "cordoned": False,
        "healthy": True,
        "healthMessage": "",
        "labels": {},
    }
    dgx = {**base, "name": "dgx-0", "extended": {"nvidia.com/hostdev": 8, "hugepages-2Mi": 2**31}}
    plain = {**base, "name": "plain", "extended": {}}
    console = Console(width=200, record=True)
    console.print(render.nodes_table([dgx, plain]))
    lines = console.export_text().splitlines()
    assert lines[0].split()[-1] == "RESOURCES"
    assert lines[1].endswith("hugepages-2Mi=2 GiB,nvidia.com/hostdev=8")
    assert lines[2].split()[-1] == "-"
    console = Console(width=200, record=True)
    console.print(render.nodes_table([plain]))
    assert "RESOURCES" not in console.export_text()
