"""Say what a benchmark ran on: CPU model, cores, memory, Python, operating system."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import psutil


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), or what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Hardware", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, which containers narrow)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def describe_machine() -> dict[str, Any]:
    """A JSON-ready description of this machine, for a benchmark's report."""
    return {
        "cpu_model": cpu_model(),
        "cores": usable_cores(),
        "logical_cpus": os.cpu_count() or 1,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.platform(terse=True),
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def machine_line(machine: dict[str, Any]) -> str:
    """One readable line: ``AMD EPYC, 2 cores, 23.5 GiB memory, CPython 3.11.7, Linux...``.

    With the load average when known: other work on the machine skews every timing.
    """
    line = (
        f"{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB memory, "
        f"{machine['python']}, {machine['os']}"
    )
    loads = [machine.get(k) for k in ("load_average_1m", "load_average_after")]
    if any(v is not None for v in loads):
        line += "; load average " + " -> ".join(str(v) for v in loads if v is not None)
    return line
