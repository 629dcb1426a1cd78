"""Running the CLI in-process against the app: what a command printed and how it exited."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpcore
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from kiban.cli import main
from kiban.sdk import client as sdk_client
from kiban.sdk.client import Client


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
        client = Client(url="http://testserver", token=token)
        client._http.close()
        client._http._pool = ThroughApp(TestClient(app))  # type: ignore[assignment]
        return client

    def run(*args: str) -> Done:
        monkeypatch.setattr(sdk_client, "Client", connect)
        return run_cli(monkeypatch, capsys, *command, *args)

    return run


class ThroughApp:
    """Stands in for the SDK client's connection pool: each request (as httpcore's) is
    answered by the app in this process (Starlette's test client)."""

    def __init__(self, app: TestClient) -> None:
        self.app = app

    def handle_request(self, request: httpcore.Request) -> httpcore.Response:
        body = b"".join(request.stream)  # type: ignore[arg-type]
        answer = self.app.request(
            request.method.decode(),
            request.url.target.decode(),
            headers=[(k.decode(), v.decode()) for k, v in request.headers],
            content=body,
        )
        reason = {"reason_phrase": answer.reason_phrase.encode()}
        headers = list(answer.headers.raw)
        return httpcore.Response(
            answer.status_code, headers=headers, content=answer.content, extensions=reason
        )

    def close(self) -> None:
        self.app.close()


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
