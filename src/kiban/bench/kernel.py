"""A minimal Jupyter kernel client over Jupyter Server's REST and websocket API.

Used by ``kiban bench web`` (an execute round trip through kiban's notebook route and directly
to Jupyter, side by side) and by the browser tier (a cell executed through the route). It
speaks the JSON form of the kernel messaging protocol on ``/api/kernels/<id>/channels``
(https://jupyter-client.readthedocs.io/en/stable/messaging.html; Jupyter Server's websocket
without a subprotocol), which is all a round trip needs.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

PROTOCOL_VERSION = "5.3"


class KernelError(RuntimeError):
    """A kernel could not be started, reached, or did not answer in time."""


@dataclass(frozen=True)
class Executed:
    """What one ``execute_request`` brought back: its reply's status, the text the cell printed
    (its ``stream`` messages) and the seconds from the request sent to the reply read."""

    status: str
    stdout: str
    seconds: float


@dataclass
class KernelClient:
    """A kernel of the Jupyter server at ``base`` (e.g. ``http://host/nb/team/nb1/`` through
    kiban, or Jupyter's own URL), authenticated by ``headers`` (kiban's bearer token, or
    ``Authorization: token <jupyter token>`` directly). Start one with ``start()``; ``close()``
    shuts the kernel down."""

    base: str
    headers: dict[str, str]
    timeout_s: float = 60.0
    kernel_id: str = ""
    session: str = field(default_factory=lambda: uuid.uuid4().hex)
    _socket: ClientConnection | None = None
    _exits: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def _url(self, path: str) -> str:
        return self.base.rstrip("/") + "/" + path.lstrip("/")

    def start(self) -> KernelClient:
        with httpx.Client(headers=self.headers, timeout=self.timeout_s) as http:
            answer = http.post(self._url("api/kernels"), json={"name": "python3"})
        if answer.status_code not in (200, 201):
            raise KernelError(
                f"starting a kernel at {self.base}: {answer.status_code} {answer.text}"
            )
        self.kernel_id = str(answer.json()["id"])
        ws_base = self._url(f"api/kernels/{self.kernel_id}/channels").replace("http", "ws", 1)
        self._socket = self._exits.enter_context(
            connect(
                f"{ws_base}?session_id={self.session}",
                additional_headers=self.headers,
                open_timeout=self.timeout_s,
                max_size=None,
            )
        )
        return self

    def execute(self, code: str) -> Executed:
        """Send ``code`` as an ``execute_request`` and read messages until its
        ``execute_reply`` and the kernel's idle status (outputs come on iopub, which may trail
        the reply); the time is from the send to the reply."""
        if self._socket is None:
            raise KernelError("the kernel is not started")
        msg_id = uuid.uuid4().hex
        request = {
            "header": {
                "msg_id": msg_id,
                "msg_type": "execute_request",
                "session": self.session,
                "username": "kiban",
                "date": "",
                "version": PROTOCOL_VERSION,
            },
            "parent_header": {},
            "metadata": {},
            "content": {
                "code": code,
                "silent": False,
                "store_history": False,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
            "channel": "shell",
            "buffers": [],
        }
        stdout: list[str] = []
        elapsed: float | None = None  # to the execute_reply (shell channel)
        status = ""
        idle = False  # the kernel's idle status (iopub): every output of the cell has come
        started = time.perf_counter()
        self._socket.send(json.dumps(request))
        deadline = started + self.timeout_s
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise KernelError(f"no execute_reply within {self.timeout_s:g}s")
            message = _decoded(self._socket.recv(timeout=left))
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = message.get("header", {}).get("msg_type") or message.get("msg_type")
            content = message.get("content", {})
            if kind == "stream":
                stdout.append(str(content.get("text", "")))
            elif kind == "execute_reply":
                elapsed = time.perf_counter() - started
                status = str(content.get("status", ""))
            elif kind == "status" and content.get("execution_state") == "idle":
                idle = True
            if elapsed is not None and idle:
                return Executed(status=status, stdout="".join(stdout), seconds=elapsed)

    def close(self) -> None:
        """Close the websocket and shut the kernel down (so the server goes idle)."""
        if self._socket is not None:
            self._exits.close()  # closes the websocket
            self._socket = None
        if self.kernel_id:
            with httpx.Client(headers=self.headers, timeout=self.timeout_s) as http:
                http.delete(self._url(f"api/kernels/{self.kernel_id}"))
            self.kernel_id = ""

    def __enter__(self) -> KernelClient:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _decoded(frame: str | bytes) -> dict[str, Any]:
    if isinstance(frame, bytes):
        frame = frame.decode()
    message: dict[str, Any] = json.loads(frame)
    return message
