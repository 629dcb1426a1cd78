"""The processes and clients of ``kiban bench router``: an instant replica, the router, and
closed-loop clients over raw keep-alive connections.

Run as ``python -m kiban.bench.router_load replica|router ...`` it is one of the helper
processes (each its own process, so no two share an event loop or the GIL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from kiban.bench.loadgen import BenchError

TENANT, SERVICE, REVISION = "bench", "echo", "v1"
"""The one service the bench routes to."""


class InstantReplica(asyncio.Protocol):
    """Answers every request (no body expected) with one small fixed JSON body."""

    def __init__(self, answer: bytes, delay_s: float) -> None:
        self._answer = answer
        self._delay_s = delay_s
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data
        count = buffer.count(b"\r\n\r\n")
        self._buffer = buffer[buffer.rfind(b"\r\n\r\n") + 4 :] if count else buffer
        if not count or self._transport is None:
            return
        if self._delay_s:
            loop = asyncio.get_running_loop()
            loop.call_later(self._delay_s, self._transport.write, self._answer * count)
        else:
            self._transport.write(self._answer * count)


def serve_replica(port_file: Path, delay_ms: float) -> None:
    """Listen on a loopback port and, as kiban's model server under the local executor, on a
    Unix socket beside the port file (``replica_socket``)."""
    from kiban.serving.router.server import new_event_loop

    loop = new_event_loop()
    answer = [b""]

    async def main() -> None:
        server = await loop.create_server(
            lambda: InstantReplica(answer[0], delay_ms / 1000), "127.0.0.1", 0, backlog=4096
        )
        # kept in a name: a server nothing refers to may be collected, and so closed
        unix_server = await loop.create_unix_server(
            lambda: InstantReplica(answer[0], delay_ms / 1000),
            str(replica_socket(port_file)),
            backlog=4096,
        )
        port = server.sockets[0].getsockname()[1]
        body = json.dumps({"ok": True, "replica": port}).encode()
        answer[0] = (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%b" % (len(body), body)
        )
        write_port(port_file, port)
        async with server, unix_server:
            await asyncio.Event().wait()

    loop.run_until_complete(main())


def serve_router(port_file: Path, upstream: str) -> None:
    from kiban.serving.router import native
    from kiban.serving.router.server import RouterServer
    from kiban.serving.router.table import Endpoint, Route, RoutingTable

    table = RoutingTable()
    table.set(
        Route(TENANT, SERVICE, {REVISION: 100}, (Endpoint(REVISION, upstream, True),), public=True)
    )
    server = RouterServer(table)
    server.start()
    router_build_file(port_file).write_text(
        json.dumps({"compiled": native.running_compiled(), "detail": native.state.detail})
    )
    write_port(port_file, server.port)
    threading.Event().wait()


def replica_socket(port_file: Path) -> Path:
    """The Unix socket a replica helper listens on besides its port."""
    return port_file.with_name("replica.sock")


def router_build_file(port_file: Path) -> Path:
    """Where a router helper says whether it runs compiled (``kiban.serving.router.native``)."""
    return port_file.with_name("router-build.json")


def write_port(port_file: Path, port: int) -> None:
    scratch = port_file.with_suffix(".tmp")
    scratch.write_text(str(port))
    scratch.rename(port_file)


class HelperProcess:
    """A helper process of this module, and the port it listens on."""

    def __init__(
        self, role: str, *args: str, timeout_s: float = 20.0, env: dict[str, str] | None = None
    ) -> None:
        self.port_file = Path(tempfile.mkdtemp(prefix="kiban-bench-router-")) / "port"
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kiban.bench.router_load", role, str(self.port_file), *args],
            env=None if env is None else {**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._timeout_s = timeout_s
        self._port: int | None = None

    def poll_port(self) -> int | None:
        if self._port is None and self.port_file.exists():
            self._port = int(self.port_file.read_text())
        if self._port is None and self.proc.poll() is not None:
            error = self.proc.stderr.read().decode()[-2000:] if self.proc.stderr else ""
            raise BenchError(f"a helper process exited: {error}")
        return self._port

    def wait_port(self) -> int:
        deadline = time.perf_counter() + self._timeout_s
        while (port := self.poll_port()) is None:
            if time.perf_counter() > deadline:
                raise BenchError("a helper process did not start listening")
            time.sleep(0.01)
        return port

    def cpu_s(self) -> float | None:
        try:
            import psutil

            times = psutil.Process(self.proc.pid).cpu_times()
            return float(times.user + times.system)
        except Exception:
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.port_file.parent, ignore_errors=True)


@contextlib.contextmanager
def helper_processes() -> Iterator[list[HelperProcess]]:
    started: list[HelperProcess] = []
    try:
        yield started
    finally:
        for process in started:
            process.stop()


# -- the load generator --------------------------------------------------------------------
class Client(asyncio.Protocol):
    """One closed-loop client over a keep-alive connection: send, read the answer, again."""

    def __init__(self, request: bytes, phase: Phase) -> None:
        self._request = request
        self._phase = phase
        self._buffer = b""
        self._need = -1
        self._sent_at = 0.0
        self.transport: asyncio.Transport | None = None
        self.last_body = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self) -> None:
        if self.transport is None or self._phase.stopped:
            return
        self._sent_at = time.perf_counter()
        self.transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data
        if self._need < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self._buffer = buffer
                return
            head = buffer[:end].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
            self._need = end + 4 + length
            if not head.startswith(b"http/1.1 200"):
                self._phase.errors += 1
        if len(buffer) < self._need:
            self._buffer = buffer
            return
        self._phase.record(
            time.perf_counter() - self._sent_at, buffer[self._need - 60 : self._need]
        )
        self._buffer = buffer[self._need :]
        self._need = -1
        self.send()


class Phase:
    """Latencies of one load phase, counted after the warm-up."""

    def __init__(self, count_from: float, seen: Callable[[bytes], None] | None = None) -> None:
        self.count_from = count_from
        self.latencies: list[float] = []
        self.errors = 0
        self.total = 0
        self.stopped = False
        self._seen = seen

    def record(self, latency: float, tail: bytes) -> None:
        self.total += 1
        if time.perf_counter() >= self.count_from:
            self.latencies.append(latency)
        if self._seen is not None:
            self._seen(tail)


async def open_clients(port: int, path: str, count: int, phase: Phase) -> list[Client]:
    loop = asyncio.get_running_loop()
    request = f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode()
    clients = []
    for _ in range(count):
        _, client = await loop.create_connection(lambda: Client(request, phase), "127.0.0.1", port)
        clients.append(client)
    return clients


def main(argv: list[str] | None = None) -> None:
    """The helper processes: ``replica PORT_FILE DELAY_MS`` and ``router PORT_FILE UPSTREAM``
    (compiled where a build exists, as under ``kiban up``)."""
    from kiban.serving.router import native

    native.activate()
    parser = argparse.ArgumentParser(prog="python -m kiban.bench.router_load")
    parser.add_argument("role", choices=("replica", "router"))
    parser.add_argument("port_file", type=Path)
    parser.add_argument("arg")
    args = parser.parse_args(argv)
    if args.role == "replica":
        serve_replica(args.port_file, float(args.arg))
    else:
        serve_router(args.port_file, args.arg)


if __name__ == "__main__":
    main()
