"""The CLI as processes against a live ``kiban up``: Ctrl-C ends a watch cleanly, completion
asks the server, ``--env`` and ``--export`` reach (or not) the job's processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from e2e_support import KIBAN, KibanServer  # noqa: E402


@pytest.mark.parametrize("command", [["ls"], ["describe", "JOB"]], ids=" ".join)
def test_ctrl_c_ends_a_watch_cleanly(live: KibanServer, command: list[str]) -> None:
    job = live.run_job("sleep", "60")
    args = [job if word == "JOB" else word for word in command]
    watcher = subprocess.Popen(
        [str(KIBAN), *args, "--watch", "--interval", "0.5"],
        env=live.env,
        cwd=live.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        first = watcher.stdout.readline()  # the first drawing has begun
        assert first.strip(), watcher.stderr.read() if watcher.stderr else ""
        watcher.send_signal(signal.SIGINT)
        watcher.wait(timeout=60)
        assert watcher.stderr is not None
        out, err = watcher.stdout.read(), watcher.stderr.read()
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert job in first + out
    live.ok("cancel", job)


def test_completion_asks_the_server(live: KibanServer) -> None:
    job = live.run_job("true")

    def complete(words: str, index: int) -> list[str]:
        env: dict[str, Any] = {
            **live.env,
            "_KIBAN_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(index),
        }
        done = subprocess.run(
            [str(KIBAN)], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        return done.stdout.split()

    assert job in complete("kiban describe ", 2)
    assert complete(f"kiban logs {job[:4]}", 2)[0].startswith(job[:4])
    assert complete("kiban run --queue d", 3) == ["default"]
    assert complete("kiban describe service ", 3) == []


def test_env_and_export_reach_the_job(live: KibanServer) -> None:
    env = {"HF_TOKEN": "hf-secret", "WANDB_MODE": "offline"}
    script = 'echo "greeting=$GREETING mode=${WANDB_MODE:-unset} hf=${HF_TOKEN:-unset}"'
    done = live.cli(
        "run", "--env", "GREETING=hello", "--export", "ALL", "--", "sh", "-c", script, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "left out HF_TOKEN" in done.stderr
    job = done.stdout.strip()
    live.wait_for_state(job, "Succeeded")
    assert "greeting=hello mode=offline hf=unset" in live.log_text(job)


def test_a_misspelled_option_submits_nothing(live: KibanServer) -> None:
    before = live.client.jobs(limit=1000)
    done = live.cli("run", "--gpu", "1", "--", "python3", "-c", "print(1)")
    assert done.returncode == 2
    assert "did you mean --gpus?" in " ".join(done.stderr.replace("│", " ").split())
    assert live.client.jobs(limit=1000) == before


def test_an_empty_token_variable_uses_the_homes_token(live: KibanServer) -> None:
    # KIBAN_TOKEN= said "missing token ... (looked for <home>/token)", that file being there.
    done = live.cli("ls", "-o", "json", env={"KIBAN_TOKEN": "", "KIBAN_URL": ""})
    assert done.returncode == 0, done.stderr
    assert isinstance(json.loads(done.stdout), list)
