"""The API's HTTP connections on a live server: heads are bounded, requests that stop half way
are closed, and a request refused before its body is answered, not reset.

The server is uvicorn with kiban's protocol (``GuardedHttpProtocol``, with deadlines short
enough for a test) in a thread; the client is a raw socket, which can send half a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from fastapi.testclient import TestClient
from starlette.types import Receive, Scope, Send

from kiban.api.app import create_app
from kiban.api.http_protocol import GuardedHttpProtocol
from kiban.platform import Platform
from kiban.testing import eventually

HEAD_TIMEOUT_S = 0.5
BODY_TIMEOUT_S = 0.5


class QuickProtocol(GuardedHttpProtocol):
    head_timeout_s = HEAD_TIMEOUT_S
    body_timeout_s = BODY_TIMEOUT_S


@pytest.fixture
def server(platform: Platform) -> Iterator[tuple[str, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(
        create_app(platform), http=QuickProtocol, log_level="warning", lifespan="on"
    )
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    eventually(lambda: served.started, what="the server to start", timeout=30, interval=0.01)
    yield sock.getsockname()
    served.should_exit = True
    thread.join(10)


def connect(address: tuple[str, int]) -> socket.socket:
    conn = socket.create_connection(address)
    conn.settimeout(10)
    return conn


def read_to_end(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails)."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def test_a_head_over_64_kib_is_431_and_closed(server: tuple[str, int]) -> None:
    conn = connect(server)
    head = b"GET /api/v1/whoami HTTP/1.1\r\nHost: k\r\nX-Big: " + b"a" * (256 * 1024)
    with contextlib.suppress(ConnectionError):  # it may stop reading once it has answered
        conn.sendall(head + b"\r\n\r\n")
    answer = read_to_end(conn)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b"larger than 64 KiB" in answer


@pytest.mark.parametrize(
    "partial",
    [b"GET /api/v1/who", b"GET /api/v1/whoami HTTP/1.1\r\nHost: k\r\nAuthorization: Bea"],
)
def test_a_request_that_stops_half_way_is_408_and_closed(
    server: tuple[str, int], partial: bytes
) -> None:
    conn = connect(server)
    conn.sendall(partial)
    started = time.monotonic()
    answer = read_to_end(conn)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started < HEAD_TIMEOUT_S + 5


def test_a_connection_that_sends_nothing_is_closed(server: tuple[str, int]) -> None:
    conn = connect(server)
    started = time.monotonic()
    assert read_to_end(conn) == b""
    assert time.monotonic() - started < HEAD_TIMEOUT_S + 5


def test_a_body_that_stops_half_way_is_408_and_closed(
    server: tuple[str, int], admin_token: str
) -> None:
    conn = connect(server)
    conn.sendall(
        b"POST /api/v1/jobs HTTP/1.1\r\nHost: k\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {admin_token}\r\n".encode()
        + b'Content-Length: 1000\r\n\r\n{"apiVersion":'
    )
    answer = read_to_end(conn)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_an_unauthenticated_big_body_is_answered_401_at_once_and_not_read(
    server: tuple[str, int],
) -> None:
    """50 MB declared, 1 MiB sent: the answer comes without the rest, and the connection is
    closed after it (gently: the client reads the answer, not a reset)."""
    conn = connect(server)
    started = time.monotonic()
    conn.sendall(
        b"POST /api/v1/jobs HTTP/1.1\r\nHost: k\r\nContent-Type: application/json\r\n"
        b"Content-Length: 52428800\r\n\r\n" + b"x" * (1 << 20)
    )
    answer = read_to_end(conn)
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert b"connection: close" in answer.lower()
    assert time.monotonic() - started < 5


def test_a_kept_alive_connection_serves_requests_one_after_another(
    server: tuple[str, int], admin_token: str
) -> None:
    """The deadlines do not cut a client that sends whole requests."""
    conn = connect(server)
    request = (
        f"GET /api/v1/whoami HTTP/1.1\r\nHost: k\r\nAuthorization: Bearer {admin_token}\r\n\r\n"
    )
    for _ in range(3):
        conn.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(65536)
        assert head.startswith(b"HTTP/1.1 200 ")
        time.sleep(HEAD_TIMEOUT_S * 1.5)  # idle between requests is keep-alive's, not a head's


async def never_answers(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that answers nothing: what a loop too busy to run a request's task looks like."""
    await asyncio.Event().wait()


@pytest.fixture
def stuck_server() -> Iterator[tuple[str, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(never_answers, http=QuickProtocol, log_level="warning", lifespan="off")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    eventually(lambda: served.started, what="the server to start", timeout=30, interval=0.01)
    yield sock.getsockname()
    served.should_exit = True
    served.force_exit = True  # the app's tasks never end
    thread.join(10)


def read_answer(conn: socket.socket, body_bytes: int) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """One answer's status line, headers (lower-case names) and ``body_bytes`` of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    while len(body) < body_bytes:
        body += conn.recv(65536)
    status, *lines = head.split(b"\r\n")
    headers = dict(line.lower().split(b": ", 1) for line in lines)
    return status, headers, body


def test_healthz_is_answered_by_the_connection_without_the_app(
    stuck_server: tuple[str, int],
) -> None:
    """GET and HEAD ``/healthz``, one after another and pipelined on a kept-alive connection,
    are answered though the app never runs: no task waits in the loop's line for them."""
    conn = connect(stuck_server)
    for _ in range(2):
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: k\r\n\r\n")
        status, headers, body = read_answer(conn, 15)
        assert status == b"HTTP/1.1 200 OK"
        assert headers[b"content-type"] == b"application/json"
        assert headers[b"content-length"] == b"15"
        assert b"connection" not in headers
        assert body == b'{"status":"ok"}'
    conn.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: k\r\n\r\n" + b"GET /healthz HTTP/1.1\r\n\r\n")
    both = b""
    while not both.endswith(b'{"status":"ok"}'):
        both += conn.recv(65536)
    head_answer, get_answer = both.split(b"HTTP/1.1 200 OK\r\n")[1:]
    assert head_answer.endswith(b"content-length: 15\r\n\r\n")  # and no body
    assert get_answer.endswith(b'content-length: 15\r\n\r\n{"status":"ok"}')


def test_healthz_over_http_1_0_is_answered_and_closed(stuck_server: tuple[str, int]) -> None:
    conn = connect(stuck_server)
    conn.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
    answer = read_to_end(conn)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nconnection: close\r\n" in answer
    assert answer.endswith(b'\r\n\r\n{"status":"ok"}')


def test_healthz_with_a_body_is_left_to_the_app(stuck_server: tuple[str, int]) -> None:
    conn = connect(stuck_server)
    conn.settimeout(0.5)
    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: k\r\nContent-Length: 2\r\n\r\n{}")
    with pytest.raises(TimeoutError):
        conn.recv(1)


def test_healthz_from_the_connection_is_the_apps_answer(
    server: tuple[str, int], api: TestClient
) -> None:
    """The same status, headers (besides uvicorn's ``date`` and ``server``) and body as the
    app's own answer (admission's)."""
    conn = connect(server)
    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: k\r\n\r\n")
    _, headers, body = read_answer(conn, 15)
    apps = api.get("/healthz")
    assert body == apps.content
    assert {k: v for k, v in headers.items() if k not in (b"date", b"server")} == {
        k.encode(): v.encode() for k, v in apps.headers.items()
    }
