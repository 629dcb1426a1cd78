"""A notebook job's entry point: JupyterLab on the port kiban gave the job.

Run as ``python -m kiban.web.jupyter_runtime [jupyter lab arguments]``. The port comes from
``$MASTER_PORT`` (picked by the executor at launch) and Jupyter's token from
``$JUPYTER_TOKEN`` (added at launch), both by environment so that neither is on the command
line; the notebook's directory (``--ServerApp.root_dir=``) is made if it is missing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT_DIR_FLAG = "--ServerApp.root_dir="


def jupyter_argv(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The argument list and environment to exec JupyterLab with."""
    child = dict(env)
    child["JUPYTER_PORT"] = env.get("MASTER_PORT", "8888")
    child["JUPYTER_PORT_RETRIES"] = "0"  # the port kiban knows, or fail: never another one
    return [sys.executable, "-m", "jupyterlab", *argv], child


def main() -> None:
    argv = sys.argv[1:]
    for arg in argv:
        if arg.startswith(ROOT_DIR_FLAG):
            Path(arg.removeprefix(ROOT_DIR_FLAG)).mkdir(parents=True, exist_ok=True)
    args, env = jupyter_argv(argv, dict(os.environ))
    os.execve(args[0], args, env)


if __name__ == "__main__":
    main()
