"""``--help`` shows the code in docstrings and help texts as code, not as reST's ``x``."""

from __future__ import annotations

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from kiban.cli.lazy_group import LazyGroup
from kiban.cli.main import app

runner = CliRunner()


def command_paths() -> list[list[str]]:
    found: list[list[str]] = []

    def walk(command: typer.core.TyperGroup | object, path: list[str]) -> None:
        found.append(path)
        loaded = command.load_all() if isinstance(command, LazyGroup) else None
        for name, sub in (loaded or getattr(command, "commands", {})).items():
            walk(sub, [*path, name])

    walk(get_command(app), [])
    return found


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "kiban")
def test_help_shows_no_rest_backticks(path: list[str]) -> None:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "``" not in result.output


def test_the_code_in_a_help_text_is_kept() -> None:
    result = runner.invoke(app, ["--help"])
    text = " ".join(result.output.replace("│", " ").split())  # as one line, box and wraps gone
    assert "kiban model-server --help" in text
    assert "kiban run --nodes 2 --gpus-per-node 4 -- torchrun train.py" in text
