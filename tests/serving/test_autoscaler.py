"""The autoscaler over simulated time: a manual clock, per-second samples, ticks every 2 s."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from kiban.serving.autoscaler import (
    ScalerState,
    ScalingPolicy,
    decide,
    metric_points,
    window_average,
)
from kiban.serving.cpu_use import CpuSample
from kiban.serving.router.traffic import ConcurrencySample

TICK_S = 2.0  # Knative's tick-interval


@dataclass
class Tick:
    t: float
    desired: int
    panicking: bool


def simulate(
    policy: ScalingPolicy,
    load: Callable[[float], float],
    *,
    until: float,
    replicas: int,
    waiting: Callable[[float], int] = lambda t: 0,
    rps: Callable[[float], float] = lambda t: 0.0,
) -> list[Tick]:
    """Tick the autoscaler every 2 s; replicas become ready as soon as they are wanted."""
    state = ScalerState()
    ticks = []
    t = TICK_S
    while t <= until:
        samples = [
            ConcurrencySample(at=float(s), concurrency=load(s), requests=round(rps(s)))
            for s in range(max(0, int(t) - 120), int(t))
        ]
        decision = decide(
            policy, state, samples, ready_replicas=replicas, waiting=waiting(t), now=t
        )
        state = decision.state
        replicas = decision.desired
        ticks.append(Tick(t, decision.desired, decision.panicking))
        t += TICK_S
    return ticks


def at(ticks: list[Tick], t: float) -> Tick:
    return next(tick for tick in ticks if tick.t >= t)


POLICY = ScalingPolicy(target=10)  # 7 per replica at Knative's 70% utilization


@pytest.mark.parametrize(
    ("load", "expected"),
    [(10.0, 2), (7.0, 1), (70.0, 10), (71.0, 11)],
)
def test_steady_load_settles_on_load_over_target_times_utilization(
    load: float, expected: int
) -> None:
    ticks = simulate(POLICY, lambda t: load, until=200, replicas=expected)
    assert {tick.desired for tick in ticks[-60:]} == {expected}
    assert not any(tick.panicking for tick in ticks)


@pytest.mark.parametrize(
    ("load", "start", "expected"),
    [(10.0, 1, 2), (7.0, 4, 1), (70.0, 1, 10), (71.0, 20, 11)],
)
def test_steady_load_is_reached_from_another_count(load: float, start: int, expected: int) -> None:
    ticks = simulate(POLICY, lambda t: load, until=300, replicas=start)
    assert {tick.desired for tick in ticks[-30:]} == {expected}


def test_a_10x_step_panics_and_scales_up_within_the_panic_window() -> None:
    step = 100.0
    ticks = simulate(POLICY, lambda t: 10.0 if t < step else 100.0, until=200, replicas=2)
    assert at(ticks, step - 1).desired == 2 and not at(ticks, step - 1).panicking
    assert at(ticks, step + 2).panicking  # 2x the ready replicas well before 6 s
    assert at(ticks, step + 2).desired > 2
    assert at(ticks, step + 6).desired == math.ceil(100 / 7)


def test_no_scale_down_while_panicking_then_back_to_the_stable_count() -> None:
    def load(t: float) -> float:
        return 100.0 if 100 <= t < 110 else 10.0

    ticks = simulate(POLICY, load, until=300, replicas=2)
    peak = max(tick.desired for tick in ticks)
    assert peak == math.ceil(100 / 7)
    panic = [tick for tick in ticks if tick.panicking]
    # panic lasts a stable window past its last reason, and holds the peak throughout
    assert panic[0].t < 104 and 160 <= panic[-1].t <= 172
    assert all(tick.desired == peak for tick in panic if tick.t >= 106)
    assert at(ticks, 290).desired == 2


def test_a_gradual_decline_scales_down_step_by_step_to_zero() -> None:
    ticks = simulate(POLICY, lambda t: max(0.0, 100.0 - t / 3), until=500, replicas=15)
    counts = [tick.desired for tick in ticks]
    assert counts[0] == 15
    assert all(b <= a for a, b in itertools.pairwise(counts))  # never up
    assert all(b >= a // 2 for a, b in itertools.pairwise(counts))  # rate bound
    assert not any(tick.panicking for tick in ticks)
    assert counts[-1] == 0


@pytest.mark.parametrize(
    ("t", "expected"),
    [(60, 1), (118, 1), (148, 1), (152, 0), (200, 0)],
)
def test_scale_to_zero_after_the_stable_window_and_the_grace_period(
    t: float, expected: int
) -> None:
    """Traffic ends at 60 s: the stable window is empty from 120 s, then 30 s of grace."""
    ticks = simulate(POLICY, lambda s: 5.0 if s < 60 else 0.0, until=220, replicas=1)
    assert at(ticks, t).desired == expected


def test_min_replicas_keeps_replicas_without_traffic() -> None:
    policy = ScalingPolicy(target=10, min_replicas=2)
    ticks = simulate(policy, lambda t: 0.0, until=300, replicas=2)
    assert {tick.desired for tick in ticks} == {2}


def test_a_waiting_request_scales_from_zero_at_once() -> None:
    state = ScalerState()
    idle = decide(POLICY, state, [], ready_replicas=0, waiting=0, now=1000.0)
    assert idle.desired == 0
    woken = decide(POLICY, idle.state, [], ready_replicas=0, waiting=1, now=1000.5)
    assert woken.desired == 1


def test_traffic_from_zero_scales_to_what_it_needs() -> None:
    ticks = simulate(POLICY, lambda t: 0.0 if t < 50 else 40.0, until=70, replicas=0)
    assert at(ticks, 48).desired == 0
    assert at(ticks, 56).desired == math.ceil(40 / 7)


@pytest.mark.parametrize(
    ("policy", "load", "expected"),
    [
        (ScalingPolicy(target=10, max_replicas=5), 1000.0, 5),
        (ScalingPolicy(target=10, min_replicas=3, max_replicas=5), 1.0, 3),
        (ScalingPolicy(target=10, min_replicas=4, max_replicas=4), 1000.0, 4),
    ],
)
def test_min_and_max_replicas_bound_the_count(
    policy: ScalingPolicy, load: float, expected: int
) -> None:
    ticks = simulate(policy, lambda t: load, until=200, replicas=expected)
    assert ticks[-1].desired == expected
    assert all(policy.min_replicas <= tick.desired <= policy.max_replicas for tick in ticks)


def test_rps_is_scaled_on_requests_per_second() -> None:
    policy = ScalingPolicy(metric="rps", target=100)  # 70 rps per replica
    ticks = simulate(policy, lambda t: 1.0, rps=lambda t: 350.0, until=150, replicas=5)
    assert ticks[-1].desired == 5


def simulate_cpu(
    policy: ScalingPolicy, busy_cores: Callable[[float], float], *, until: float, replicas: int
) -> list[Tick]:
    """As ``simulate``, on the cpu metric: the replicas share ``busy_cores`` of work, each
    requesting one core (so the utilization summed over them is the busy cores)."""
    state = ScalerState()
    ticks = []
    t = TICK_S
    while t <= until:
        cpu = [
            CpuSample(at=float(s), seconds=1.0, utilization=busy_cores(s))
            for s in range(max(0, int(t) - 120), int(t))
        ]
        decision = decide(policy, state, [], ready_replicas=replicas, waiting=0, now=t, cpu=cpu)
        state = decision.state
        replicas = decision.desired
        ticks.append(Tick(t, decision.desired, decision.panicking))
        t += TICK_S
    return ticks


CPU_POLICY = ScalingPolicy(metric="cpu", target=80, max_replicas=10)


@pytest.mark.parametrize(
    ("busy", "start", "expected"),
    [
        (2.4, 3, 3),  # 80% each
        (3.3, 3, 5),  # 3.3 / 0.8 = 4.1: beyond the 10% tolerance, up to 5
        (2.6, 3, 3),  # 2.6 / 2.4 = 1.08: within the tolerance, stays
        (2.1, 3, 3),  # 2.1 / 2.4 = 0.875: beyond it, but 3 is ceil(2.1 / 0.8)
        (0.7, 3, 1),  # down to what 70% of one core needs
    ],
)
def test_cpu_scales_to_the_busy_cores_over_the_target_percentage(
    busy: float, start: int, expected: int
) -> None:
    ticks = simulate_cpu(CPU_POLICY, lambda t: busy, until=300, replicas=start)
    assert {tick.desired for tick in ticks[-30:]} == {expected}


def test_cpu_within_the_tolerance_keeps_the_replicas_it_has() -> None:
    """1.7 busy cores on 2 replicas at 80%: 6% over the target, within the HPA's 10%."""
    ticks = simulate_cpu(CPU_POLICY, lambda t: 1.7, until=300, replicas=2)
    assert {tick.desired for tick in ticks} == {2}
    more = simulate_cpu(CPU_POLICY, lambda t: 1.9, until=300, replicas=2)  # 19% over
    assert more[-1].desired == 3


def test_a_cpu_step_panics_and_scales_up_within_the_panic_window() -> None:
    step = 100.0
    ticks = simulate_cpu(CPU_POLICY, lambda t: 0.8 if t < step else 8.0, until=200, replicas=1)
    assert at(ticks, step - 1).desired == 1
    assert at(ticks, step + 2).panicking and at(ticks, step + 2).desired > 1
    assert at(ticks, step + 6).desired == 10


def test_cpu_never_scales_to_zero() -> None:
    policy = ScalingPolicy(metric="cpu", target=50, min_replicas=0)
    ticks = simulate_cpu(policy, lambda t: 0.0, until=400, replicas=3)
    assert ticks[-1].desired == 1
    assert min(tick.desired for tick in ticks) == 1


def test_cpu_before_any_reading_keeps_the_replicas_there_are() -> None:
    policy = ScalingPolicy(metric="cpu", target=50, min_replicas=0, max_replicas=4)
    for ready, expected in ((3, 3), (0, 1), (6, 4)):
        held = decide(policy, ScalerState(), [], ready_replicas=ready, waiting=0, now=9.0, cpu=[])
        assert held.desired == expected and "no CPU reading" in held.note


def test_cpu_from_an_executor_that_cannot_tell_scales_on_concurrency_with_a_note() -> None:
    samples = [ConcurrencySample(at=float(s), concurrency=20.0, requests=0) for s in range(60)]
    decision = decide(
        ScalingPolicy(metric="cpu", target=10),  # 10 in flight at 70%: 7 per replica
        ScalerState(),
        samples,
        ready_replicas=3,
        waiting=0,
        now=60.0,
        cpu=None,
    )
    assert decision.desired == 3 and "scaled on concurrency" in decision.note


def test_the_cpu_target_defaults_to_80_percent_of_the_request() -> None:
    assert ScalingPolicy(metric="cpu").per_replica == pytest.approx(0.8)
    assert ScalingPolicy(metric="cpu", target=120).per_replica == pytest.approx(1.2)


def test_the_average_weighs_the_current_partial_second_by_its_length() -> None:
    samples = [
        ConcurrencySample(at=0.0, concurrency=2.0, requests=0),
        ConcurrencySample(at=1.0, concurrency=8.0, requests=0, seconds=0.5),
    ]
    points = metric_points("concurrency", samples, [])
    assert window_average(points, 1.5, 60) == pytest.approx(4.0)
    assert window_average(points, 1.5, 0.5) == pytest.approx(8.0)


def test_invalid_policies_are_refused() -> None:
    with pytest.raises(ValueError):
        ScalingPolicy(metric="memory")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ScalingPolicy(min_replicas=3, max_replicas=2)
    with pytest.raises(ValueError):
        ScalingPolicy(target=0)
