"""Ctrl-C while ``kiban`` is still loading its modules: exit 130 and no traceback.

The interrupt is delivered deterministically: a ``sitecustomize`` on the child's path sends
the process SIGINT when a given module is first imported: Typer (the command line's own
modules loading) or Rich (a command's, loaded as it runs), which is where a person's Ctrl-C
lands when a command is typed and abandoned at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

INTERRUPT_ON_IMPORT = """
import os, signal, sys
MODULE = {module!r}

class InterruptOnImport:
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptOnImport())
"""


@pytest.mark.parametrize("module", ["typer", "rich"])
def test_ctrl_c_while_the_cli_loads_exits_130_without_a_traceback(
    tmp_path: Path, module: str
) -> None:
    (tmp_path / "sitecustomize.py").write_text(INTERRUPT_ON_IMPORT.format(module=module))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "kiban.cli.entry", "ls"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, done.stderr
