"""``kiban dev kube``: bad input is refused with a message naming the option, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kiban.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "-1"], "--nodes must not be negative"),
        (["--gpus-per-node", "-2"], "--gpus-per-node must not be negative"),
        (["--label", "novalue"], "--label must be KEY=VALUE"),
        (["--label", "bad key=x"], "--label: 'bad key' is not a valid label key"),
        (["--label", "team=not ok"], "--label: value 'not ok' of team"),
        (["--topology", "2x0x4"], "--topology must be ISLANDSxBLOCKSxLOCAL_BLOCKS"),
        (["--topology", "2x4"], "--topology must be ISLANDSxBLOCKSxLOCAL_BLOCKS"),
        (["--gpu-product", "H100 SXM"], "--gpu-product"),
        (["--timeout", "0"], "--timeout must be positive"),
    ],
)
def test_up_rejects_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["dev", "kube", "up", "--dir", str(tmp_path), *args])
    assert result.exit_code == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert list(tmp_path.iterdir()) == []  # nothing was started or written


def test_up_needs_dir() -> None:
    result = runner.invoke(app, ["dev", "kube", "up"])
    assert result.exit_code == 2
    assert "--dir" in result.stderr


def test_up_without_binaries_says_how_to_build_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIBAN_KUBE_BIN", str(tmp_path / "nowhere"))
    result = runner.invoke(app, ["dev", "kube", "up", "--dir", str(tmp_path / "c")])
    assert result.exit_code == 1
    assert "scripts/ensure-kube.sh" in result.stderr
    assert "Traceback" not in result.stderr


def test_down_of_an_empty_directory_says_nothing_ran(tmp_path: Path) -> None:
    result = runner.invoke(app, ["dev", "kube", "down", "--dir", str(tmp_path)])
    assert result.exit_code == 0
    assert "nothing was running" in result.stderr


def test_up_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "etcd").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["dev", "kube", "up", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "was not made by kiban dev kube up" in result.stderr
    assert "--dir" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["etcd", "notes.txt"]


def test_up_refuses_a_file_as_dir(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    result = runner.invoke(app, ["dev", "kube", "up", "--dir", str(path)])
    assert result.exit_code == 1
    assert "is not a directory" in result.stderr
