"""Quantities and durations: what parses to what, what is refused and how it is printed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kiban.domain.quantity import (
    format_duration,
    format_memory,
    parse_cpu_millis,
    parse_duration,
    parse_memory,
)

GI = 2**30
MI = 2**20


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4Gi", 4 * GI),
        ("512Mi", 512 * MI),
        ("1Ki", 1024),
        ("2Ti", 2 * 2**40),
        ("1.5Gi", 3 * GI // 2),
        ("1G", 10**9),
        ("1k", 1000),
        ("1K", 1000),
        ("3M", 3 * 10**6),
        ("123", 123),
        (" 4Gi ", 4 * GI),
        (4096, 4096),
        (0, 0),
    ],
)
def test_memory_quantities(text: str | int, expected: int) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("4GB", "'4GB' is not a memory quantity"),
        ("4 Gi", "is not a memory quantity"),
        ("Gi", "is not a memory quantity"),
        ("-1Gi", "is not a memory quantity"),
        ("", "is not a memory quantity"),
        ("4gi", "is not a memory quantity"),
        (-1, "must not be negative"),
        (True, "not a boolean"),
    ],
)
def test_bad_memory_quantities(value: str | int, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_memory(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("2", 2000), ("0.5", 500), ("500m", 500), ("1.25", 1250), (2, 2000), (0.1, 100), (0, 0)],
)
def test_cpu_quantities(value: str | float, expected: int) -> None:
    assert parse_cpu_millis(value) == expected


@pytest.mark.parametrize("value", ["2 cpus", "1.5m", "m", "", "-1", "two"])
def test_bad_cpu_quantities(value: str) -> None:
    with pytest.raises(ValueError, match="is not a CPU quantity"):
        parse_cpu_millis(value)


@pytest.mark.parametrize("value", [-1, -0.5, True])
def test_negative_or_boolean_cpu_is_refused(value: float) -> None:
    with pytest.raises(ValueError):
        parse_cpu_millis(value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("30m", 1800.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("7d", 7 * 86400.0),
        ("1w", 604800.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        ("90", 90.0),
        ("2.5", 2.5),
        (45, 45.0),
        (0, 0.0),
    ],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["2 hours", "1h 30m", "h", "", "10x", "1h30", "-5s", "1.h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def test_negative_duration_number_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        parse_duration(-1)


@pytest.mark.parametrize("value", [None, [1], {"a": 1}])
@pytest.mark.parametrize("parse", [parse_memory, parse_cpu_millis, parse_duration])
def test_non_string_values_are_refused_with_value_error(
    parse: Callable[[Any], object], value: object
) -> None:
    with pytest.raises(ValueError):
        parse(value)


@pytest.mark.parametrize("parse", [parse_memory, parse_cpu_millis])
def test_infinite_quantity_is_refused_with_value_error(parse: Callable[[Any], object]) -> None:
    with pytest.raises(ValueError):
        parse(float("inf"))


@pytest.mark.parametrize(
    ("num_bytes", "text"),
    [
        (4 * GI, "4Gi"),
        (1536 * MI, "1536Mi"),
        (1024, "1Ki"),
        (2**40, "1Ti"),
        (1023, "1023"),
        (GI + 1, str(GI + 1)),
        (0, "0"),
    ],
)
def test_format_memory_is_exact_and_shortest(num_bytes: int, text: str) -> None:
    assert format_memory(num_bytes) == text
    assert parse_memory(text) == num_bytes


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59, "59s"),
        (60, "1m00s"),
        (185, "3m05s"),
        (3600, "1h00m"),
        (3725, "1h02m"),
        (47 * 3600 + 59 * 60, "47h59m"),
        (48 * 3600, "2d00h"),
        (50 * 3600, "2d02h"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
