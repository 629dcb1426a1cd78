"""New connections' requests are begun a few per turn of the event loop (``kiban.api.turns``,
``GuardedHttpProtocol.starts_per_turn``), so that a burst is spread over short turns and a
``/healthz`` waits for one of them; held requests lose nothing and keep their order."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from kiban.api.http_protocol import GuardedHttpProtocol
from kiban.api.turns import TurnPacer
from kiban.testing import eventually

PER_TURN = 2


# -- the pacer alone -------------------------------------------------------------------------------
def test_the_pacer_begins_per_turn_at_most_and_in_order() -> None:
    async def run() -> tuple[list[bool], list[tuple[int, int]], bool]:
        loop = asyncio.get_running_loop()
        pacer = TurnPacer(loop, per_turn=2)
        turn = [0]

        def count() -> None:  # runs once in every turn
            turn[0] += 1
            if turn[0] < 10:
                loop.call_soon(count)

        loop.call_soon(count)
        begun: list[tuple[int, int]] = []  # (request, turn)

        def begin(i: int) -> Callable[[], bool]:
            def begun_now() -> bool:
                begun.append((i, turn[0]))
                return True

            return begun_now

        now = [pacer.admit(begin(i)) for i in range(7)]
        assert pacer.waiting == 5
        while turn[0] < 10:
            await asyncio.sleep(0)
        return now, begun, pacer.admit(begin(7))

    now, begun, later = asyncio.run(run())
    assert now == [True, True, False, False, False, False, False]
    assert [i for i, _ in begun] == [2, 3, 4, 5, 6]  # first come, first begun
    assert sorted(Counter(turn for _, turn in begun).values()) == [1, 2, 2]
    assert later  # a later turn has room again


def test_a_connection_gone_from_the_line_takes_no_room() -> None:
    async def run() -> list[str]:
        pacer = TurnPacer(asyncio.get_running_loop(), per_turn=1)
        begun: list[str] = []

        def next_one() -> bool:
            begun.append("next")
            return True

        assert pacer.admit(lambda: True)
        pacer.admit(lambda: False)  # closed while it waited
        pacer.admit(next_one)
        for _ in range(3):
            await asyncio.sleep(0)
        return begun

    assert asyncio.run(run()) == ["next"]


def test_the_pacer_needs_room_for_one() -> None:
    with pytest.raises(ValueError, match="per_turn"):
        TurnPacer(asyncio.new_event_loop(), per_turn=0)


# -- on a live server ------------------------------------------------------------------------------
class PacedProtocol(GuardedHttpProtocol):
    starts_per_turn = PER_TURN


@dataclass
class TurnRecorder:
    """An ASGI app that counts the loop's turns and notes the turn each request began in.
    ``/block`` holds the loop (not a task: the whole loop) until the test opens ``gate``, so
    that the requests sent meanwhile are all there to read in one turn."""

    gate: threading.Event = field(default_factory=threading.Event)
    blocking: threading.Event = field(default_factory=threading.Event)
    began: dict[str, int] = field(default_factory=dict)
    turn: int = 0
    counting: bool = False
    done: bool = False

    def _count(self) -> None:
        self.turn += 1
        if not self.done:
            asyncio.get_running_loop().call_soon(self._count)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if not self.counting:
            self.counting = True
            asyncio.get_running_loop().call_soon(self._count)
        self.began[scope["path"]] = self.turn
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/block":
            self.blocking.set()
            self.gate.wait(10)  # the loop itself waits here
        answer = b"%d" % len(body)
        headers = [(b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


@pytest.fixture
def paced() -> Iterator[tuple[tuple[str, int], TurnRecorder, uvicorn.Server]]:
    app = TurnRecorder()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(app, http=PacedProtocol, log_level="warning", lifespan="off")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    eventually(lambda: served.started, what="the server to start", timeout=30, interval=0.01)
    yield sock.getsockname(), app, served
    app.gate.set()
    app.done = True
    served.should_exit = True
    thread.join(10)


def answer_of(conn: socket.socket) -> bytes:
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def test_a_burst_is_begun_a_few_requests_per_turn_and_every_request_is_answered(
    paced: tuple[tuple[str, int], TurnRecorder, uvicorn.Server],
) -> None:
    """Connections open first (the server takes one a turn), then their requests arrive
    together while the loop is held: all readable in one turn, as in a burst."""
    address, app, served = paced
    blocker, split, probe, *burst = (
        socket.create_connection(address, timeout=10) for _ in range(15)
    )
    eventually(
        lambda: len(served.server_state.connections) == 15,
        what="the server to take every connection",
        timeout=10,
        interval=0.01,
    )
    blocker.sendall(b"GET /block HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n")
    eventually(app.blocking.is_set, what="the loop to be held", timeout=10, interval=0.01)
    for i, conn in enumerate(burst):
        conn.sendall(f"GET /r{i} HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n".encode())
    split.sendall(b"POST /split HTTP/1.1\r\nHost: k\r\nConnection: close\r\n")
    split.sendall(b"Content-Length: 10\r\n\r\n01234")  # the rest after it is held
    probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n")
    app.gate.set()
    split.sendall(b"56789")

    assert answer_of(probe).startswith(b"HTTP/1.1 200 ")
    for conn in burst:
        assert answer_of(conn).startswith(b"HTTP/1.1 200 ")
    split_answer = answer_of(split)
    assert split_answer.startswith(b"HTTP/1.1 200 ")
    assert split_answer.endswith(b"\r\n\r\n10")  # the whole body, held part and later part
    assert answer_of(blocker).startswith(b"HTTP/1.1 200 ")

    turns = Counter(turn for path, turn in app.began.items() if path != "/block")
    assert sum(turns.values()) == 13
    assert max(turns.values()) <= PER_TURN, app.began  # unpaced: all 13 in one turn
    assert len(turns) >= 13 // PER_TURN
    assert "/healthz" not in app.began  # answered by the connection, never held
