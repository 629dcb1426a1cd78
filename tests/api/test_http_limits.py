"""The API's HTTP connections on a live server: heads are bounded, requests that stop half way
are closed, and a request refused before its body is answered, not reset.

The server is uvicorn with kiban's protocol (``GuardedHttpProtocol``, with deadlines short
enough for a test) in a thread; the client is a raw socket, which can send half a request.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

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
