"""Decayed usage: halves in a half-life, converges under a constant rate, and does not depend on
how often it is updated."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiban.domain.usage import LN2, accrue, decay, standing, weighted_rate

DAY = 86400.0


def test_usage_halves_in_one_half_life() -> None:
    assert decay(100.0, 7 * DAY, 7 * DAY) == pytest.approx(50.0)
    assert accrue(100.0, 0.0, 14 * DAY, 7 * DAY) == pytest.approx(25.0)


def test_holding_a_rate_for_a_short_time_adds_about_rate_times_time() -> None:
    # 8 GPUs for an hour with a week's half-life: almost 8 GPU-hours.
    assert accrue(0.0, 8.0, 3600.0, 7 * DAY) == pytest.approx(8 * 3600.0, rel=0.003)


def test_a_constant_rate_converges_to_rate_times_half_life_over_ln2() -> None:
    assert accrue(0.0, 4.0, 200 * DAY, 7 * DAY) == pytest.approx(4.0 * 7 * DAY / LN2)


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0, 1e9),
    st.floats(0, 1024),
    st.floats(0.001, 30 * DAY),
    st.floats(0.001, 30 * DAY),
)
def test_two_updates_equal_one(usage: float, rate: float, first: float, second: float) -> None:
    half_life = 7 * DAY
    stepwise = accrue(accrue(usage, rate, first, half_life), rate, second, half_life)
    at_once = accrue(usage, rate, first + second, half_life)
    assert stepwise == pytest.approx(at_once, rel=1e-9, abs=1e-6)


def test_weights_and_standing() -> None:
    assert weighted_rate({"gpu": 8, "cpu": 32}, {"gpu": 1.0}) == 8.0
    assert weighted_rate({"gpu": 2, "cpu": 10}, {"gpu": 1.0, "cpu": 0.1}) == pytest.approx(3.0)
    assert standing(1000.0, 2.0) == 500.0
    assert standing(1.0, 0.0) == math.inf
