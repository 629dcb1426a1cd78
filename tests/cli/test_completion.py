"""Shell completion: the scripts for bash, zsh and fish, and the names completed from the
server (job ids, queues, services), which must come back empty, not as an error, when there is
no server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from cli_support import Run, flat

from kiban.cli import complete
from kiban.sdk.client import Client


@pytest.fixture
def server_names(
    run_as: Callable[[str], Run], admin_token: str, monkeypatch: pytest.MonkeyPatch
) -> Run:
    """The CLI as the admin, and completion asking the same in-process app."""
    from kiban.sdk import client as sdk_client

    kiban = run_as(admin_token)
    kiban("--version")  # installs the in-process client on kiban.sdk.client

    def connect() -> Client:
        made: Client = sdk_client.Client()
        return made

    monkeypatch.setattr(complete, "connect", connect)
    return kiban


def test_job_ids_queues_and_describe_targets(server_names: Run) -> None:
    kiban = server_names
    first = kiban("run", "--name", "alpha", "--", "true").out.strip()
    second = kiban("run", "--name", "beta", "--", "true").out.strip()
    assert sorted(complete.job_ids("")) == [first, second]
    assert complete.job_ids("al") == [first]
    assert sorted(complete.unfinished_job_ids("")) == [first, second]
    kiban("cancel", first)
    assert complete.unfinished_job_ids("") == [second]
    assert complete.queue_names("") == ["default"]
    assert complete.service_names("") == []
    assert complete.describe_targets("s") == ["service"]
    assert complete.describe_targets("n") == ["node"]
    assert complete.node_names("node-") == ["node-0", "node-1", "node-2"]
    assert complete.describe_targets("be") == [second]


def test_no_server_completes_nothing_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIBAN_URL", "http://127.0.0.1:9")  # the discard port: refused
    monkeypatch.setenv("KIBAN_TOKEN", "t")
    started = time.monotonic()
    assert complete.job_ids("") == []
    assert complete.queue_names("") == []
    assert complete.service_names("x") == []
    assert time.monotonic() - started < 3 * complete.TIMEOUT_S + 5  # bounded, not hung


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kiban.cli.main", "--show-completion", shell],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "_KIBAN_COMPLETE" in done.stdout


def test_the_root_offers_installing_completion(kiban: Run) -> None:
    text = flat(kiban("--help").out)
    assert "--install-completion" in text and "--show-completion" in text
    assert "--version" in text


def test_bash_protocol_completes_commands_without_a_server(tmp_path: object) -> None:
    env = {
        **os.environ,
        "_KIBAN_COMPLETE": "complete_bash",
        "COMP_WORDS": "kiban des",
        "COMP_CWORD": "1",
        "KIBAN_URL": "http://127.0.0.1:9",
    }
    done = subprocess.run(
        [sys.executable, "-m", "kiban.cli.main"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["describe"]
    env["COMP_WORDS"], env["COMP_CWORD"] = "kiban describe ", "2"
    done = subprocess.run(
        [sys.executable, "-m", "kiban.cli.main"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert (done.returncode, done.stdout.split(), done.stderr) == (0, ["service", "node"], "")
