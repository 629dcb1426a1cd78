"""CLI commands run in-process: the SDK's HTTP client is the app's test client, so each command
talks to the API as it would over the network."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
from cli_support import Done, Run
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.cli import admin, main, policy
from kiban.platform import Platform
from kiban.sdk.client import Client


@pytest.fixture
def run_as(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[str], Run]:
    """``run_as(token)("policy", "show")``: the CLI's exit code, stdout and stderr."""

    def with_token(token: str) -> Run:
        def connect() -> Client:
            client = Client(url="http://testserver", token=token)
            client._http.close()
            client._http = TestClient(
                create_app(platform), headers={"Authorization": f"Bearer {token}"}
            )
            return client

        def run(*args: str) -> Done:
            for module in (main, policy, admin):
                monkeypatch.setattr(module, "Client", connect)
            monkeypatch.setattr(sys, "argv", ["kiban", *args])
            capsys.readouterr()
            try:
                main.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            captured = capsys.readouterr()
            return Done(code, captured.out, captured.err)

        return run

    return with_token


@pytest.fixture
def kiban(run_as: Callable[[str], Run], admin_token: str) -> Run:
    return run_as(admin_token)
