"""``kiban bench cli``: the report's shape and its internal consistency (never its speed)."""

from __future__ import annotations

import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_support import TEST_MACHINE, rendered

from kiban.bench.cli import CASES, CliBenchOptions, bytecode_counts, cli_table, has_current_bytecode


@pytest.mark.e2e
def test_tiny_run() -> None:
    """Two rounds over three jobs, through the CLI: one JSON object on one line."""
    command = [
        sys.executable,
        "-m",
        "kiban.cli.main",
        "bench",
        "cli",
        "--runs",
        "2",
        "--jobs",
        "3",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    report: dict[str, Any] = json.loads(lines[0])
    assert set(report) == {*CASES, "ls_above_floor_s", "goals_met", "settings", "machine"}
    for case in CASES:
        assert set(report[case]) == {"p50_s", "p99_s"}
        assert 0 < report[case]["p50_s"] <= report[case]["p99_s"], case
    # Each command is Python's start-up and more: none beats the floor.
    assert report["ls"]["p50_s"] > report["floor"]["p50_s"]
    assert report["ls_above_floor_s"] == pytest.approx(
        report["ls"]["p50_s"] - report["floor"]["p50_s"], abs=1e-3
    )
    assert set(report["goals_met"]) == {"ls_p50", "ls_above_floor"}
    assert report["settings"]["runs"] == 2 and report["settings"]["jobs"] == 3
    assert isinstance(report["settings"]["bytecode_cached"], bool)
    assert 0 <= report["settings"]["bytecode_current_files"] <= report["settings"]["source_files"]
    assert "kiban ls" in done.stderr and report["machine"]["cpu_model"] in done.stderr


def test_table_puts_the_commands_beside_the_floor() -> None:
    report: dict[str, Any] = {
        "version": {"p50_s": 0.08, "p99_s": 0.1},
        "ls": {"p50_s": 0.15, "p99_s": 0.3},
        "describe": {"p50_s": 0.16, "p99_s": 0.2},
        "floor": {"p50_s": 0.02, "p99_s": 0.03},
        "typer": {"p50_s": 0.05, "p99_s": 0.06},
        "libraries": {"p50_s": 0.11, "p99_s": 0.12},
        "ls_above_floor_s": 0.13,
        "goals_met": {"ls_p50": True, "ls_above_floor": True},
        "settings": {
            "runs": 20,
            "jobs": 100,
            "kiban": "/venv/bin/kiban",
            "bytecode_cached": False,
            "bytecode_current_files": 3,
            "source_files": 400,
            "dont_write_bytecode": True,
        },
        "machine": TEST_MACHINE,
    }
    text = rendered(cli_table(report))
    rows = {
        line.split("│")[1].strip(): line.split("│")[2:5]
        for line in text.splitlines()
        if line.startswith("│")
    }
    assert [cell.strip() for cell in rows["kiban ls"]] == ["150 ms", "300 ms", "+130 ms"]
    assert [cell.strip() for cell in rows["python -c pass"]] == ["20 ms", "30 ms", ""]
    assert [cell.strip() for cell in rows["import typer"]] == ["50 ms", "60 ms", "+30 ms"]
    assert "kiban ls p50 <= 200 ms (met)" in text
    assert "Test CPU, 2 cores" in text
    assert "bytecode: NOT cached for kiban's modules (current for 3 of 400 source" in text
    assert "PYTHONDONTWRITEBYTECODE is set" in text


@pytest.mark.parametrize(("runs", "jobs"), [(0, 10), (5, 0), (5, 1001)])
def test_options_are_checked(runs: int, jobs: int) -> None:
    with pytest.raises(ValueError):
        CliBenchOptions(runs=runs, jobs=jobs)


@pytest.mark.parametrize(
    "mode",
    [py_compile.PycInvalidationMode.TIMESTAMP, py_compile.PycInvalidationMode.CHECKED_HASH],
    ids=lambda m: m.name,
)
def test_bytecode_counts_only_caches_import_would_use(
    tmp_path: Path, mode: py_compile.PycInvalidationMode
) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    compiled, edited, never = (package / f"{n}.py" for n in ("compiled", "edited", "never"))
    for source in (compiled, edited, never):
        source.write_text("x = 1\n")
    for source in (compiled, edited):
        py_compile.compile(str(source), invalidation_mode=mode, doraise=True)
    edited.write_text("x = 12\n")  # changed after it was compiled: its cache is stale
    stamp = edited.stat().st_mtime + 5
    os.utime(edited, (stamp, stamp))
    assert has_current_bytecode(compiled)
    assert not has_current_bytecode(edited)
    assert not has_current_bytecode(never)
    assert bytecode_counts(package) == (1, 3)
