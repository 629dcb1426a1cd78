"""What ``kiban bench router`` measures and for how long: read by both its parts, the router's
added latency (``kiban.bench.router``) and the autoscaler live (``router_autoscale``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RouterBenchOptions:
    """What ``kiban bench router`` measures and for how long."""

    clients: tuple[int, ...] = (1, 50, 500)
    duration_s: float = 2.0
    """Of each load phase (direct, then through the router, per client count and round)."""
    warmup_s: float = 0.5
    """Of each phase, not counted."""
    rounds: int = 3
    """Direct and through the router in turn this many times per client count; the figures
    are medians over the rounds."""
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
    replica_link: str = "unix"
    """How the router reaches the replica: "unix" (a Unix socket, as it reaches kiban's model
    server under the local executor) or "tcp" (loopback TCP, as a replica on another host)."""

    def __post_init__(self) -> None:
        if not self.clients or any(c < 1 for c in self.clients):
            raise ValueError("--clients must be positive")
        if self.duration_s <= 0 or self.warmup_s < 0:
            raise ValueError("--duration must be positive and --warmup not negative")
        if self.rounds < 1:
            raise ValueError(f"--rounds must be positive, got {self.rounds}")
        if self.replica_link not in ("unix", "tcp"):
            raise ValueError(f"--replica-link must be unix or tcp, got {self.replica_link!r}")
        if self.step_clients < 1 or self.step_target <= 0:
            raise ValueError("--step-clients and the target must be positive")
