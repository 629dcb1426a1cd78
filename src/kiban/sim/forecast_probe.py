"""Time one start-time forecast on a snapshot a replay really passed through.

``python -m kiban.sim.forecast_probe --trace FILE [kiban sim's cluster options] --policy NAME``
replays the trace under that policy, keeps the snapshot with the most waiting jobs (the
control loop's worst case), then times ``scheduler.forward.forecast`` on it with the default
policy, as the loop calls it (``max_cycles=50``) and with the function's default cycle bound.
The replay policy should be an oracle (sjf, srtf) when the trace has no time limits: the
forecast only sees ends through running jobs' ``max_runtime``, which oracles fill in.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from kiban.scheduler.decisions import Decisions
from kiban.scheduler.forward import forecast
from kiban.scheduler.policy import DEFAULT_POLICY
from kiban.scheduler.snapshot import Snapshot
from kiban.sim.engine import Simulator
from kiban.sim.policies import policy_named
from kiban.sim.run import SimOptions, prepare
from kiban.sim.traces import parse_window


def busiest_snapshot(options: SimOptions, policy: str) -> Snapshot:
    """The snapshot with the most waiting jobs (ties: the first) over one replay."""
    prepared = prepare(options)
    best: list[Snapshot] = []

    def keep(snapshot: Snapshot, _decisions: Decisions) -> None:
        if not best or len(snapshot.pending) > len(best[0].pending):
            best[:] = [snapshot]

    Simulator(
        prepared.jobs,
        prepared.cluster,
        prepared.queues,
        policy_named(policy),
        checkpoint_s=options.checkpoint_s,
        on_cycle=keep,
    ).run()
    return best[0]


def time_forecast(snapshot: Snapshot, max_cycles: int, repeat: int) -> dict[str, object]:
    """Median and range of ``repeat`` forecasts, and how many jobs got an estimate."""
    times = []
    starts: dict[str, float | None] = {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        starts = forecast(snapshot, DEFAULT_POLICY, max_cycles=max_cycles)
        times.append(time.perf_counter() - t0)
    return {
        "max_cycles": max_cycles,
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "estimated": sum(v is not None for v in starts.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--quotas-from", type=Path)
    parser.add_argument("--no-borrowing", action="store_true")
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--window")
    parser.add_argument("--policy", default="sjf")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    options = SimOptions(
        trace=args.trace,
        nodes=args.nodes,
        quotas_from=args.quotas_from,
        borrowing=not args.no_borrowing,
        load=args.load,
        window=parse_window(args.window) if args.window else (None, None),
        policies=(args.policy,),
        rho=False,
    )
    snapshot = busiest_snapshot(options, args.policy)
    result = {
        "waiting": len(snapshot.pending),
        "running": len(snapshot.running),
        "nodes": len(snapshot.nodes),
        "load_average": os.getloadavg(),
        "forecasts": [time_forecast(snapshot, n, args.repeat) for n in (50, 200)],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
