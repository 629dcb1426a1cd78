"""CLI commands run in-process: the SDK's HTTP client is the app's test client, so each command
talks to the API as it would over the network."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_support import Run, in_process

from kiban.api.app import create_app
from kiban.platform import Platform


@pytest.fixture
def run_as(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[str], Run]:
    """``run_as(token)("policy", "show")``: the CLI's exit code, stdout and stderr."""

    def with_token(token: str) -> Run:
        return in_process(create_app(platform), token, monkeypatch, capsys)

    return with_token


@pytest.fixture
def kiban(run_as: Callable[[str], Run], admin_token: str) -> Run:
    return run_as(admin_token)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real ``kiban up`` (3 x 2 GPUs) for a module's tests of the CLI as processes; the
    end-to-end tier's handle (tests/e2e/e2e_support.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
    from e2e_support import server_factory

    with server_factory(tmp_path_factory) as start:
        server = start(nodes=3, gpus_per_node=2)
        yield server
        assert server.running, f"the server died:\n{server.log_tail()}"
