"""Commands load when called: ``kiban``'s registry (``kiban.cli.main.COMMANDS``) names each
command's module, imported only for that command, and the line that lists it, which must be
the command's own help (else ``kiban --help`` would show stale text)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer._click.core import Context
from typer.main import get_command
from typer.testing import CliRunner

from kiban.cli.lazy_group import LazyGroup, Listed, listed_help
from kiban.cli.main import COMMANDS, app

COMMAND_MODULES = sorted({lazy.target.partition(":")[0] for lazy in COMMANDS.values()})

PROBE = """
import atexit, json, sys
def report():
    with open({modules!r}, "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(report)
sys.argv = ["kiban", *json.loads(sys.argv[1])]
from kiban.cli.main import main
main()
"""


def kiban_loading(
    args: list[str], tmp_path: Path, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``kiban ARGS`` in a fresh interpreter: what it did, and every module it had imported."""
    modules = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(modules=str(modules)), json.dumps(args)],
        capture_output=True,
        text=True,
        env={**os.environ, "KIBAN_URL": "http://127.0.0.1:9", "KIBAN_TOKEN": "t", **env},
        timeout=120,
        check=False,
    )
    return done, json.loads(modules.read_text())


def root_group() -> LazyGroup:
    group = get_command(app)
    assert isinstance(group, LazyGroup)
    return group


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_is_listed_with_its_own_help(name: str) -> None:
    command = root_group().load(name)
    assert not isinstance(command, Listed)
    assert command.name == name
    assert listed_help(command) == COMMANDS[name].summary


def test_calling_a_command_loads_that_one_alone() -> None:
    group = root_group()
    resolved, command, rest = group.resolve_command(Context(group), ["ls", "-o", "json"])
    assert (resolved, rest) == ("ls", ["-o", "json"])
    assert command is not None and not isinstance(command, Listed)
    loaded = [name for name, c in group.commands.items() if not isinstance(c, Listed)]
    assert loaded == ["ls"]


def test_listing_the_commands_imports_none_of_them(tmp_path: Path) -> None:
    done, modules = kiban_loading(["--help"], tmp_path, COLUMNS="200")
    assert done.returncode == 0, done.stderr
    assert [m for m in COMMAND_MODULES if m in modules] == []
    for name, lazy in COMMANDS.items():
        assert f" {name} " in done.stdout, name
        assert lazy.summary.split()[0].strip("`") in done.stdout, name


def test_shell_completion_lists_the_commands_with_their_help_unloaded(tmp_path: Path) -> None:
    done, modules = kiban_loading(
        [], tmp_path, _KIBAN_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS="kiban c"
    )
    assert done.returncode == 0, done.stderr
    offered = set(re.findall(r'"([a-z-]+)":"', done.stdout))  # zsh's "name":"help" pairs
    assert offered == {n for n in COMMANDS if n.startswith("c")}
    assert "Cancel jobs" in done.stdout  # with its line of help
    assert [m for m in COMMAND_MODULES if m in modules] == []


def test_ls_loads_the_job_commands_and_no_other(tmp_path: Path) -> None:
    done, modules = kiban_loading(["ls"], tmp_path)
    assert "cannot reach kiban" in done.stderr  # it ran: the discard port refused it
    assert [m for m in COMMAND_MODULES if m in modules] == ["kiban.cli.jobs"]


def test_a_misspelled_command_gets_the_nearest_one() -> None:
    result = CliRunner().invoke(app, ["lss"])
    assert result.exit_code == 2
    assert "Did you mean 'ls'?" in result.output
