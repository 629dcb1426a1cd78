"""The layers of kiban, as pyproject.toml's import-linter contracts state them: kept by the
sources, and each contract broken by the import it forbids (added to a copy of the sources)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import kiban

SOURCES = Path(kiban.__file__).resolve().parent
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def lint(src: Path, tmp_path: Path, *only: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the kiban package under ``src``, with the project's contracts."""
    args = [str(PYPROJECT), "--no-cache", "--no-logo"]
    for contract in only:
        args += ["--contract", contract]
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-c", LINT, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_the_sources_keep_every_contract(tmp_path: Path) -> None:
    done = lint(SOURCES.parent, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(contracts())} kept, 0 broken." in done.stdout


def test_the_scheduler_is_forbidden_every_other_part_of_kiban() -> None:
    """A new package of kiban is forbidden to the scheduler as soon as it exists."""
    parts = {
        f"kiban.{p.stem}"
        for p in SOURCES.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").is_file()) and p.stem != "__init__"
    }
    forbidden = contracts()["scheduler"]["forbidden_modules"]
    assert sorted(parts - {"kiban.scheduler"}) == sorted(forbidden)  # type: ignore[arg-type]


BREAKS = [
    ("scheduler", "scheduler/core.py", "import kiban.domain.jobspec"),
    ("scheduler", "scheduler/quota.py", "from kiban.clock import Clock"),
    ("domain", "domain/quantity.py", "import kiban.scheduler.core"),
    ("domain", "domain/jobspec.py", "import kiban.serving.capacity"),
    ("domain", "domain/states.py", "import kiban.services.jobs"),
    ("acyclic", "sim/metrics.py", "import kiban.bench.loadgen"),  # sim <-> bench
    ("acyclic", "cli/render.py", "import kiban.cli.jobs"),  # cli.jobs <-> cli.render
    ("acyclic", "domain/service_replica.py", "import kiban.serving.runtime.storage"),
    ("acyclic", "services/logs.py", "import kiban.platform"),  # services <-> platform
]


@pytest.mark.parametrize(("contract", "module", "line"), BREAKS, ids=lambda v: str(v))
def test_each_contract_breaks_when_its_rule_does(
    tmp_path: Path, contract: str, module: str, line: str
) -> None:
    copy = tmp_path / "src" / "kiban"
    shutil.copytree(SOURCES, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    done = lint(copy.parent, tmp_path, contract)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BROKEN" in done.stdout
    assert module.removesuffix(".py").replace("/", ".").split(".")[0] in done.stdout
