"""``kiban bench router``, part 2: the autoscaler live. The router and the autoscaler (ticking
every 0.5 s) run in this process, replicas are started on demand as processes, the load steps
up 10x, and the report says how long until more replicas were asked for and until the first
new one served.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any

from kiban.bench.router_load import (
    REVISION,
    SERVICE,
    TENANT,
    HelperProcess,
    Phase,
    helper_processes,
    open_clients,
)
from kiban.bench.router_options import Progress, RouterBenchOptions
from kiban.serving.router.server import new_event_loop


def autoscaler_step(options: RouterBenchOptions, say: Progress) -> dict[str, Any]:
    from kiban.serving.autoscaler import ScalerState, ScalingPolicy, decide
    from kiban.serving.router.server import RouterServer
    from kiban.serving.router.table import Endpoint, Route, RoutingTable

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

    with helper_processes() as procs, RouterServer(table) as router:
        delay = str(options.step_delay_ms)
        first = HelperProcess("replica", delay)
        procs.append(first)
        ports.append(first.wait_port())
        first_ports.update(ports)
        publish()
        pending: list[HelperProcess] = []
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
                    process = HelperProcess("replica", delay)
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
        loop = new_event_loop()
        path = f"/s/{TENANT}/{SERVICE}/v2/infer"
        try:

            async def drive() -> None:
                phase = Phase(count_from=0.0, seen=seen)
                base = await open_clients(router.port, path, options.step_clients, phase)
                for conn in base:
                    conn.send()
                say(f"autoscaler: {options.step_clients} clients, then 10x")
                await asyncio.sleep(4.0)
                more = await open_clients(router.port, path, options.step_clients * 9, phase)
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
