"""What every ``kiban bench`` command shares: ``--json`` (one definition, one help text) and
options refused on one line with exit 2, nothing run."""

from __future__ import annotations

import pytest
import typer
from typer.main import get_command

from kiban.cli.bench_components import component_benches
from kiban.cli.bench_platform import platform_benches
from kiban.cli.bench_report import checked

JSON_HELP = "print one JSON object on stdout (the table goes to stderr)"


@pytest.mark.parametrize("group", [component_benches, platform_benches])
def test_every_bench_has_the_same_json_option(group: typer.Typer) -> None:
    command = get_command(group)
    assert isinstance(command, typer.core.TyperGroup)
    assert command.commands, "no bench commands found"
    for name, sub in command.commands.items():
        (option,) = [p for p in sub.params if "--json" in getattr(p, "opts", [])]
        assert isinstance(option, typer.core.TyperOption), name
        assert (option.help, option.default, option.is_flag) == (JSON_HELP, False, True), name


def _options(runs: int, *, jobs: int = 1) -> tuple[int, int]:
    if runs < 1:
        raise ValueError(f"--runs must be at least 1; got {runs}")
    return runs, jobs


def test_checked_gives_the_options_or_refuses_them_on_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert checked(_options, 3, jobs=5) == (3, 5)
    with pytest.raises(typer.Exit) as refused:
        checked(_options, 0)
    assert refused.value.exit_code == 2
    assert capsys.readouterr().err.strip() == "error: --runs must be at least 1; got 0"
