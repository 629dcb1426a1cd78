"""The autoscaler: how many replicas a revision wants, from its traffic and the time.

A pure function, as the scheduler core is: ``decide(policy, state, samples, ...)`` reads no
clock (``now`` is given) and returns the desired replica count and the state to pass next
time. It follows Knative's Knative Pod Autoscaler (KPA) and uses the defaults of Knative
Serving's ``config-autoscaler`` ConfigMap (docs "Configuring the autoscaler", "Configuring
scale bounds", "Additional autoscaling configuration for KPA"):

- ``container-concurrency-target-default`` 100 and ``requests-per-second-target-default`` 200:
  the target per replica when a service names none;
- ``container-concurrency-target-percentage`` 70: replicas are sized to 70% of the target;
- ``stable-window`` 60 s: the average that decides in normal times;
- ``panic-window-percentage`` 10: the panic window is 6 s of the stable window;
- ``panic-threshold-percentage`` 200: panic when the panic window wants >= 2x the ready
  replicas; while panicking the count never goes down, and panic ends after a stable window
  without reason to panic;
- ``max-scale-up-rate`` 1000 and ``max-scale-down-rate`` 2: one decision changes the count to
  at most 1000x, and at least 1/2, of the ready replicas;
- ``scale-to-zero-grace-period`` 30 s: with ``min_replicas`` 0, the last replica goes only after
  the stable window has seen no traffic and then 30 s more have passed;
- ``activation-scale`` 1: a request waiting for a revision at zero asks for one replica at once
  (Knative's activator pokes the autoscaler the same way).

Samples of ``concurrency`` and ``rps`` come from ``TrafficMetrics.concurrency_samples``.

The metric ``cpu`` is KServe's, served there by Kubernetes' Horizontal Pod Autoscaler (docs
"Horizontal Pod Autoscaling"): the target is a percentage of the CPU each replica requests
(80 when none is given, Kubernetes' ``DefaultCPUUtilization``), the count is the replicas' CPU
use over the target, and a stable count within 10% of the ready replicas leaves them as they
are (the HPA's ``--horizontal-pod-autoscaler-tolerance``). The windows, panic and rates are the
KPA's above. CPU use is read from running replicas, so ``cpu`` never scales to zero (nor does
the HPA); before any reading it keeps the replicas there are. Samples come from
``kiban.serving.cpu_use.CpuMeter``; an executor that cannot tell a replica's CPU use passes
none, and the revision scales on concurrency, as the decision's note says.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from kiban.serving.cpu_use import CpuSample
from kiban.serving.router.traffic import ConcurrencySample

ScaleMetric = Literal["concurrency", "rps", "cpu"]

DEFAULT_CONCURRENCY_TARGET = 100.0
DEFAULT_RPS_TARGET = 200.0
DEFAULT_CPU_TARGET = 80.0
CPU_TOLERANCE = 0.1
TARGET_UTILIZATION = 0.70
STABLE_WINDOW_S = 60.0
PANIC_WINDOW_PERCENTAGE = 10.0
PANIC_THRESHOLD = 2.0
MAX_SCALE_UP_RATE = 1000.0
MAX_SCALE_DOWN_RATE = 2.0
SCALE_TO_ZERO_GRACE_S = 30.0


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """A revision's autoscaling settings (a service's ``scaleMetric``, ``scaleTarget``, bounds)."""

    metric: ScaleMetric = "concurrency"
    target: float | None = None
    """Per replica: requests in flight (concurrency), requests/s (rps) or percent of its
    requested CPU in use (cpu); None: the default."""
    min_replicas: int = 0
    max_replicas: int = 0
    """0: no upper bound."""
    target_utilization: float = TARGET_UTILIZATION
    stable_window_s: float = STABLE_WINDOW_S
    panic_window_percentage: float = PANIC_WINDOW_PERCENTAGE
    panic_threshold: float = PANIC_THRESHOLD
    max_scale_up_rate: float = MAX_SCALE_UP_RATE
    max_scale_down_rate: float = MAX_SCALE_DOWN_RATE
    scale_to_zero_grace_s: float = SCALE_TO_ZERO_GRACE_S

    def __post_init__(self) -> None:
        if self.metric not in ("concurrency", "rps", "cpu"):
            raise ValueError(f"scaleMetric must be concurrency, rps or cpu, not {self.metric!r}")
        if self.target is not None and self.target <= 0:
            raise ValueError("scaleTarget must be positive")
        if self.min_replicas < 0 or self.max_replicas < 0:
            raise ValueError("minReplicas and maxReplicas must be >= 0")
        if self.max_replicas and self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must not exceed maxReplicas")
        if not 0 < self.target_utilization <= 1:
            raise ValueError("target_utilization must be in (0, 1]")
        if self.max_scale_down_rate < 1 or self.max_scale_up_rate < 1:
            raise ValueError("the scale rates must be >= 1")

    @property
    def panic_window_s(self) -> float:
        return self.stable_window_s * self.panic_window_percentage / 100.0

    @property
    def per_replica(self) -> float:
        """What one replica should carry: the target times the utilization (for cpu, the
        target percentage as a fraction: it is a utilization already)."""
        if self.metric == "cpu":
            return (self.target or DEFAULT_CPU_TARGET) / 100.0
        default = DEFAULT_RPS_TARGET if self.metric == "rps" else DEFAULT_CONCURRENCY_TARGET
        return (self.target or default) * self.target_utilization


@dataclass(frozen=True, slots=True)
class ScalerState:
    """What the autoscaler remembers between decisions (start with ``ScalerState()``)."""

    panic_since: float | None = None
    """When panic began or was last renewed; None when not panicking."""
    panic_peak: int = 0
    """The most replicas wanted during this panic: a floor while it lasts."""
    zero_since: float | None = None
    """Since when the stable window has wanted no replicas (for the grace period)."""


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """The desired replica count, the averages behind it, and the state for next time."""

    desired: int
    stable_value: float
    panic_value: float
    panicking: bool
    state: ScalerState
    note: str = ""
    metric: ScaleMetric = "concurrency"
    """The metric the averages are of (concurrency when cpu could not be read)."""
    per_replica: float = 0.0
    """What one replica should carry of it (``ScalingPolicy.per_replica``)."""


Point = tuple[float, float, float]
"""A metric over an interval: (start, seconds, value)."""


def metric_points(
    metric: ScaleMetric, traffic: Iterable[ConcurrencySample], cpu: Iterable[CpuSample]
) -> list[Point]:
    """The samples of ``metric`` as points: CPU use for cpu, the router's numbers otherwise."""
    if metric == "cpu":
        return [(s.at, s.seconds, s.utilization) for s in cpu]
    if metric == "rps":
        return [(s.at, s.seconds, s.rps) for s in traffic]
    return [(s.at, s.seconds, s.concurrency) for s in traffic]


def window_average(points: Iterable[Point], now: float, window_s: float) -> float:
    """The metric averaged over the last ``window_s`` seconds, weighted by time observed."""
    since = now - window_s
    weighted = 0.0
    seconds = 0.0
    for at, length, value in points:
        start = max(at, since)
        end = at + length
        if end <= since or at >= now:
            continue
        observed = min(end, now) - start
        if observed <= 0:
            continue
        weighted += value * observed
        seconds += observed
    return weighted / seconds if seconds > 0 else 0.0


def decide(
    policy: ScalingPolicy,
    state: ScalerState,
    samples: Sequence[ConcurrencySample],
    *,
    ready_replicas: int,
    waiting: int,
    now: float,
    cpu: Sequence[CpuSample] | None = None,
) -> ScaleDecision:
    """The replicas a revision should have now (Knative KPA's decision, one tick).

    ``samples`` are the router's; ``cpu`` the replicas' CPU use (None: the executor cannot
    tell, and a cpu policy scales on concurrency).

    1. average the metric over the stable window and over the panic window;
    2. divide each by what one replica should carry: the stable and panic counts (for cpu, a
       stable count within the tolerance of the ready replicas is the ready replicas);
    3. enter (or renew) panic when the panic count is >= the threshold x the ready replicas
       (at least one); leave it after a stable window without;
    4. in panic take the larger of the panic count and the panic's peak, else the stable count;
    5. bound the change by the scale-up and scale-down rates of the ready replicas;
    6. keep the last replica through the grace period before zero; a waiting request
       asks for one replica at once (cpu: never below one);
    7. bound by min and max replicas.
    """
    if policy.metric == "cpu" and cpu is None:
        note = "the executor reports no CPU use of replicas: scaled on concurrency"
        policy = replace(policy, metric="concurrency")
    elif policy.metric == "cpu" and not cpu:
        held = _bounded(max(ready_replicas, 1), policy)
        note = "no CPU reading yet: kept as is"
        return ScaleDecision(held, 0.0, 0.0, False, state, note, "cpu", policy.per_replica)
    else:
        note = ""
    metric = policy.metric
    per_replica = policy.per_replica
    points = metric_points(metric, samples, cpu or ())
    stable_value = window_average(points, now, policy.stable_window_s)
    panic_value = window_average(points, now, policy.panic_window_s)
    stable_count = math.ceil(stable_value / per_replica - 1e-9)
    panic_count = math.ceil(panic_value / per_replica - 1e-9)
    within_tolerance = (
        metric == "cpu"
        and ready_replicas > 0
        and abs(stable_value / (per_replica * ready_replicas) - 1) <= CPU_TOLERANCE
    )
    if within_tolerance:
        stable_count = ready_replicas
    ready = max(ready_replicas, 1)

    # 3. panic mode
    panic_since = state.panic_since
    over_threshold = panic_value / per_replica >= policy.panic_threshold * ready
    if over_threshold:
        panic_since = now
    elif panic_since is not None and now - panic_since >= policy.stable_window_s:
        panic_since = None
    panicking = panic_since is not None

    # 4. the count before bounds
    peak = 0
    if panicking:
        desired = max(panic_count, state.panic_peak, ready_replicas)
        peak = desired
    else:
        desired = stable_count

    # 5. rates, relative to the ready replicas
    most = math.ceil(policy.max_scale_up_rate * ready)
    least = math.floor(ready_replicas / policy.max_scale_down_rate)
    desired = min(desired, most)
    desired = max(desired, least)

    # 6. scale to zero after the grace period; from zero at once; cpu: never to zero
    zero_since = state.zero_since
    if metric == "cpu":
        desired = max(desired, 1)
    elif desired == 0 and policy.min_replicas == 0:
        if ready_replicas > 0:
            zero_since = now if zero_since is None else zero_since
            if now - zero_since < policy.scale_to_zero_grace_s:
                desired = 1
    else:
        zero_since = None
    if waiting > 0 and desired == 0:
        desired = 1
        zero_since = None

    # 7. bounds
    desired = _bounded(desired, policy)
    new_state = replace(state, panic_since=panic_since, panic_peak=peak, zero_since=zero_since)
    return ScaleDecision(
        desired=desired,
        stable_value=stable_value,
        panic_value=panic_value,
        panicking=panicking,
        state=new_state,
        note=note,
        metric=metric,
        per_replica=per_replica,
    )


def _bounded(desired: int, policy: ScalingPolicy) -> int:
    """``desired`` within the policy's min and max replicas (a max of 0: no bound)."""
    desired = max(desired, policy.min_replicas)
    return min(desired, policy.max_replicas) if policy.max_replicas else desired
