"""``kiban bench cli``: how long the CLI takes to answer, beside Python's own start-up.

A ``kiban up`` of its own gets ``--jobs`` one-replica jobs, all waiting (its one node is
cordoned, so none runs and each has a reason to show). Then, in turn for ``--runs`` rounds
after one round that is not counted (it warms the file cache), each of these runs as a
process with its wall time taken from spawn to exit:

- ``floor``: ``python -c pass``, the interpreter's start-up and exit, which no CLI beats;
- ``version``: ``kiban --version``, the CLI's own start-up;
- ``ls``: ``kiban ls``, a table of all the jobs (the HTTP client, a request, Rich);
- ``describe``: ``kiban describe JOB`` of one of them (two requests);
- ``typer`` and ``libraries``: ``python -c "import typer"``, and the same importing the
  HTTP client and Rich too (as ``kiban ls`` imports them): what the house's libraries cost
  before kiban does anything, the floor of any ``kiban ls`` made with them.

Taking them in turn puts a busy moment of the machine on all four alike, so the distance
between ``ls`` and ``floor`` is the CLI's, measured side by side.

The report says whether kiban's modules had current bytecode (``settings.bytecode_cached``):
without it (an editable install under ``PYTHONDONTWRITEBYTECODE=1``, as in CI) every call
compiles the sources it imports, some tens of milliseconds; ``make setup`` compiles them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from kiban.bench.loadgen import BenchError
from kiban.bench.machine import describe_machine, machine_line
from kiban.stats import percentile

GOAL_LS_P50_S = 0.2
GOAL_LS_ABOVE_FLOOR_S = 0.15
CASES = ("version", "ls", "describe", "floor", "typer", "libraries")
LIBRARIES = "import typer, httpcore, rich.console, rich.text"
"""What ``kiban ls`` imports of the house's libraries (the SDK speaks HTTP through httpcore)."""
CLUSTER_FILE = "queues:\n  - {name: default, tenant: default}\n"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CliBenchOptions:
    runs: int = 20
    jobs: int = 100
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError("--runs must be at least 1")
        if not 1 <= self.jobs <= 1000:
            raise ValueError("--jobs must be between 1 and 1000 (what one kiban ls lists)")


def kiban_program() -> tuple[list[str], str]:
    """How to start the CLI as a user does: the ``kiban`` console script beside this Python,
    else the same entry point through ``python -c``."""
    script = Path(sys.executable).with_name("kiban")
    if script.exists():
        return [str(script)], str(script)
    entry = "import sys; from kiban.cli.main import main; sys.exit(main())"
    return [sys.executable, "-c", entry], f"{sys.executable} -c (kiban.cli.main:main)"


def has_current_bytecode(source: Path) -> bool:
    """Whether importing ``source`` would load its cached bytecode rather than compile it: a
    cache of this interpreter whose header matches the source as import checks it (PEP 552:
    the source's mtime and size, or its hash)."""
    try:
        cache = Path(importlib.util.cache_from_source(str(source)))
        with cache.open("rb") as file:
            header = file.read(16)
        stat = source.stat()
    except (OSError, NotImplementedError, ValueError):
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(header[4:8], "little")
    if flags & 0b01:  # hash-based: checked against the source only with check_source set
        return not flags & 0b10 or header[8:16] == importlib.util.source_hash(source.read_bytes())
    mtime = int.from_bytes(header[8:12], "little")
    size = int.from_bytes(header[12:16], "little")
    return mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF


def bytecode_counts(package: Path) -> tuple[int, int]:
    """How many of the package's source files have current bytecode, of how many."""
    sources = sorted(package.rglob("*.py"))
    return sum(has_current_bytecode(source) for source in sources), len(sources)


def job_manifest(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": f"bench-cli-{index}"},
        "spec": {
            "queue": "default",
            "tasks": [
                {
                    "replicas": 1,
                    "resources": {"gpu": 0, "cpu": 1, "memory": "64Mi"},
                    "command": ["true"],
                }
            ],
        },
    }


def timed(argv: Sequence[str], env: dict[str, str], timeout_s: float) -> tuple[float, str]:
    """Wall seconds from spawning ``argv`` to its exit, and its stdout; BenchError if it
    fails."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(argv)} took more than {timeout_s:g}s") from None
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return elapsed, done.stdout


def run_cli_bench(options: CliBenchOptions, say: Progress) -> dict[str, Any]:
    from kiban.bench.servers import KibanServer
    from kiban.sdk.client import Client

    machine = describe_machine()
    program, program_text = kiban_program()
    with tempfile.TemporaryDirectory(prefix="kiban-bench-cli-") as root:
        home = Path(root) / "home"
        say("starting kiban up ...")
        server = KibanServer(home, None, options.timeout_s, CLUSTER_FILE).start()
        try:
            with Client(url=server.url, token=server.token) as api:
                for node in api.nodes():
                    api.cordon(node["name"])
                say(f"submitting {options.jobs} jobs (the node is cordoned: they wait)")
                ids = [api.submit(job_manifest(i))["id"] for i in range(options.jobs)]
            env = {k: v for k, v in os.environ.items() if not k.startswith("KIBAN_")}
            env.update({"KIBAN_URL": server.url, "KIBAN_TOKEN": server.token})
            env.update({"KIBAN_HOME": str(home)})
            commands = {
                "floor": [sys.executable, "-c", "pass"],
                "typer": [sys.executable, "-c", "import typer"],
                "libraries": [sys.executable, "-c", LIBRARIES],
                "version": [*program, "--version"],
                "ls": [*program, "ls"],
                "describe": [*program, "describe", ids[0]],
            }
            say(f"timing {', '.join(commands)}: {options.runs} rounds in turn, after one more")
            times: dict[str, list[float]] = {case: [] for case in commands}
            for round_index in range(options.runs + 1):
                for case, argv in commands.items():
                    elapsed, stdout = timed(argv, env, options.timeout_s)
                    if round_index == 0 and case == "ls":
                        missing = [i for i in ids if i not in stdout]
                        if missing:
                            raise BenchError(f"kiban ls did not list {len(missing)} of the jobs")
                    if round_index > 0:
                        times[case].append(elapsed)
        finally:
            server.stop()
    machine["load_average_after"] = describe_machine()["load_average_1m"]
    import kiban  # the package the CLI above imported: the same path, the same environment

    current, sources = bytecode_counts(Path(kiban.__file__).parent)
    report: dict[str, Any] = {
        case: {
            "p50_s": round(percentile(times[case], 50), 4),
            "p99_s": round(percentile(times[case], 99), 4),
        }
        for case in CASES
    }
    above = report["ls"]["p50_s"] - report["floor"]["p50_s"]
    report["ls_above_floor_s"] = round(above, 4)
    report["goals_met"] = {
        "ls_p50": report["ls"]["p50_s"] <= GOAL_LS_P50_S,
        "ls_above_floor": above <= GOAL_LS_ABOVE_FLOOR_S,
    }
    report["settings"] = {
        "runs": options.runs,
        "jobs": options.jobs,
        "kiban": program_text,
        "bytecode_cached": current == sources,
        "bytecode_current_files": current,
        "source_files": sources,
        "dont_write_bytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
    }
    report["machine"] = machine
    return report


_ROWS = (
    ("version", "kiban --version", "start-up and exit of the CLI alone"),
    ("ls", "kiban ls", "the jobs as a table: HTTP client, one request, Rich"),
    ("describe", "kiban describe JOB", "one job: two requests"),
    ("floor", "python -c pass", "the interpreter's start-up and exit: the floor"),
    ("typer", "import typer", "the CLI framework alone"),
    ("libraries", "import typer, httpcore, rich", "what kiban ls needs of them, before it runs"),
)


def cli_table(report: dict[str, Any]) -> Table:
    """The four commands side by side, p50 and p99, and the goals."""
    settings = report["settings"]
    table = Table(
        title=f"kiban bench cli: {settings['runs']} runs each, {settings['jobs']} jobs listed",
        title_justify="left",
        header_style="bold",
    )
    for column in ("command", "p50", "p99", "above floor (p50)"):
        table.add_column(column, justify="left" if column == "command" else "right")
    table.add_column("what it is", style="dim")
    floor = report["floor"]["p50_s"]
    for case, command, meaning in _ROWS:
        entry = report[case]
        table.add_row(
            command,
            f"{entry['p50_s'] * 1000:.0f} ms",
            f"{entry['p99_s'] * 1000:.0f} ms",
            "" if case == "floor" else f"{(entry['p50_s'] - floor) * 1000:+.0f} ms",
            meaning,
        )
    met = report["goals_met"]
    table.caption = "\n".join(
        [
            f"goals: kiban ls p50 <= {GOAL_LS_P50_S * 1000:.0f} ms "
            f"({'met' if met['ls_p50'] else 'not met'}), and <= "
            f"{GOAL_LS_ABOVE_FLOOR_S * 1000:.0f} ms above the floor "
            f"({'met' if met['ls_above_floor'] else 'not met'})"
            + ("; with under 100 runs, p99 is the slowest run" if settings["runs"] < 100 else ""),
            f"CLI: {settings['kiban']}",
            bytecode_line(settings),
            f"machine: {machine_line(report['machine'])}",
        ]
    )
    table.caption_justify = "left"
    return table


def bytecode_line(settings: dict[str, Any]) -> str:
    """Whether the CLI ran from compiled bytecode or compiled its sources on every call."""
    counts = f"{settings['bytecode_current_files']} of {settings['source_files']} source files"
    if settings["bytecode_cached"]:
        return f"bytecode: cached and current for kiban's modules ({counts})"
    unwritten = "; PYTHONDONTWRITEBYTECODE is set" if settings["dont_write_bytecode"] else ""
    return (
        f"bytecode: NOT cached for kiban's modules (current for {counts}{unwritten}): each call "
        "compiles the sources it imports; `make setup` compiles them"
    )
