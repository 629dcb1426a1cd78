"""What the benchmark table tests share: a made-up machine, and a table rendered to text."""

from __future__ import annotations

from typing import Any

from rich.console import Console, RenderableType

TEST_MACHINE: dict[str, Any] = {
    "cpu_model": "Test CPU",
    "cores": 2,
    "memory_gib": 4.0,
    "python": "CPython 3.11.7",
    "os": "Linux",
}


def rendered(table: RenderableType) -> str:
    """The table as a 200-column terminal shows it, as plain text."""
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()
