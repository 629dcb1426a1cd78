"""Running the CLI in-process against the app: what a command printed and how it exited."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from kiban.cli import main
from kiban.sdk import client as sdk_client
from kiban.sdk.client import Client
from kiban.testing.sdk_app import client_through


@dataclass
class Done:
    code: int
    out: str
    err: str


Run = Callable[..., Done]


def in_process(
    app: FastAPI,
    token: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *command: str,
) -> Run:
    """``kiban COMMAND ARGS...`` run in this process with ``token``: every command imports the
    SDK's Client when it runs, and this one answers them all through ``app``."""

    def connect(*_: Any, **__: Any) -> Client:
        return client_through(TestClient(app), token)

    def run(*args: str) -> Done:
        monkeypatch.setattr(sdk_client, "Client", connect)
        return run_cli(monkeypatch, capsys, *command, *args)

    return run


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> Done:
    """``kiban ARGS...`` run in this process: its exit code, stdout and stderr."""
    monkeypatch.setattr(sys, "argv", ["kiban", *args])
    capsys.readouterr()
    try:
        main.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return Done(code, captured.out, captured.err)


def one_error_line(done: Done, *needles: str) -> None:
    """Exit 1, nothing on stdout, one ``error:`` line naming ``needles``, no traceback."""
    assert done.code == 1, done
    assert done.out == ""
    assert "Traceback" not in done.err
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def flat(text: str) -> str:
    """Text as one line: Rich's boxes and line wraps gone (usage errors come in a panel)."""
    return " ".join(text.replace("│", " ").split())
