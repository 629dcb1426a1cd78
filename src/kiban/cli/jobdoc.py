"""The job manifest ``kiban run`` builds from its options, and the name it gives the job."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
"""Interpreters whose job is named after the script or module they run."""

PYTHON_LONG_OPTIONS_WITH_VALUE = frozenset({"--check-hash-based-pycs"})
"""The interpreter's long options that take the next word as their value."""


def _name_part(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def python_target(args: list[str]) -> str:
    """What a Python command line runs, as a name: the script's stem, the module with dots
    as dashes, or ``python`` for ``-c CODE``, stdin and the bare interpreter. Short options
    may be grouped as the interpreter allows (``-uc CODE``, ``-um pkg``, ``-Xdev``)."""
    words = iter(args)
    for word in words:
        if word == "--":
            return Path(next(words, "python")).stem
        if word.startswith("--"):
            if word in PYTHON_LONG_OPTIONS_WITH_VALUE:
                next(words, None)
            continue
        if word.startswith("-") and word != "-":
            flags = word[1:]
            for i, flag in enumerate(flags):
                rest = flags[i + 1 :]
                if flag == "c":
                    return "python"
                if flag == "m":
                    return (rest or next(words, "python")).replace(".", "-")
                if flag in "WX":
                    if not rest:
                        next(words, None)
                    break
            continue
        return "python" if word == "-" else Path(word).stem
    return "python"


def job_name_for(command: list[str]) -> str:
    """A job name from its command: the program's name, or for Python the script's
    (``python3 train.py`` -> ``train``) or module's (``python -m pkg.mod`` -> ``pkg-mod``);
    ``python -c CODE`` is ``python``. At most 40 characters; ``run`` when nothing is left."""
    if not command:
        return "run"
    program = Path(command[0]).name.lower()
    base = python_target(command[1:]) if PYTHON.match(program) else program
    name = _name_part(base)[:40].strip("-")
    return name or "run"


def spread_replicas(task: dict[str, Any], nodes: int) -> dict[str, Any]:
    """``--nodes N`` means N nodes: with more than one replica, no two may share a node
    (``maxReplicasPerNode: 1``, a constraint the scheduler core honours)."""
    if nodes > 1:
        return {**task, "maxReplicasPerNode": 1}
    return task


def run_document(
    command: list[str],
    *,
    name: str | None,
    queue: str | None,
    nodes: int,
    gpus: int,
    cpus: float,
    memory: str,
    priority: str | None,
    launcher: str,
    max_runtime: str | None,
    env: dict[str, str],
) -> dict[str, Any]:
    """The ``kiban/v1`` Job of ``kiban run``: one task ``worker`` of ``nodes`` replicas.

    No queue (None) leaves it to ``KIBAN_QUEUE`` or the server's default for the member; no
    working directory, which the SDK fills in for every submission (the current one)."""
    task: dict[str, Any] = {
        "name": "worker",
        "replicas": nodes,
        "resources": {"gpu": gpus, "cpu": cpus, "memory": memory},
        "command": command,
    }
    if env:
        task["env"] = env
    spec: dict[str, Any] = {"launcher": launcher, "tasks": [spread_replicas(task, nodes)]}
    if queue:
        spec["queue"] = queue
    if priority:
        spec["priorityClass"] = priority
    if max_runtime:
        spec["maxRuntime"] = max_runtime
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": name or job_name_for(command)},
        "spec": spec,
    }
