"""``scripts/demo.sh`` end to end: a 3-node x 2-GPU DDP job on the embedded platform, one epoch,
then an embedding service called through its URL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from e2e_support import BIN_DIR, fresh_dir, processes_with_env, remove_fresh

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "scripts" / "demo.sh"


def leftovers(home: Path) -> list[psutil.Process]:
    """Processes started for the demo's jobs (its service's replicas too) still alive."""
    root = str(home / "checkpoints")
    return processes_with_env("KIBAN_CHECKPOINT_DIR", lambda v: v.startswith(root))


@pytest.mark.timeout(600)
def test_demo_runs_to_a_test_accuracy(tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("torch", reason="the demo trains a PyTorch model")
    pytest.importorskip("sklearn", reason="the demo's bundled digits come from scikit-learn")
    base = fresh_dir(tmp_path_factory, "demo")  # as root, within reach of the tenants' users
    home = base / "demo-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("KIBAN_URL", "KIBAN_TOKEN")}
    env.update(
        {
            "PATH": f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}",
            "KIBAN_HOME": str(home),
            "KIBAN_DEMO_HOME": str(home),
            "KIBAN_DEMO_EPOCHS": "1",
        }
    )
    demo = subprocess.Popen(
        ["bash", str(DEMO)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the demo and the server it starts, killed together if stuck
    )
    try:
        output, _ = demo.communicate(timeout=560)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGKILL)
        output, _ = demo.communicate()
        pytest.fail(f"demo.sh did not finish in 560s; its output:\n{output[-6000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGKILL)  # a server the demo left behind
        stray = leftovers(home)
        for proc in stray:
            with contextlib.suppress(psutil.Error):
                proc.kill()
    server_log = (home / "server.log").read_text(errors="replace") if home.exists() else ""
    assert demo.returncode == 0, (
        f"demo.sh exited {demo.returncode}:\n{output[-6000:]}\n{server_log}"
    )
    assert "test accuracy:" in output, output[-6000:]
    assert "no accuracy reported" not in output
    assert "3 embeddings of 384 dimensions" in output, output[-6000:]
    assert stray == [], f"the demo left replica processes behind: {stray}"
    remove_fresh(base)
