"""Quantities and times in reasons read as people read them."""

from __future__ import annotations

import pytest

from kiban.scheduler import units

GIB = 2**30


@pytest.mark.parametrize(
    ("num_bytes", "text"),
    [
        (1073741824, "1 GiB"),
        (24684092 * 1024, "23.5 GiB"),  # a Kubernetes node's 24684092Ki
        (512 * 2**20, "512 MiB"),
        (1536, "1.5 KiB"),
        (100, "100 B"),
        (0, "0 B"),
        (2**50, "1 PiB"),
    ],
)
def test_sizes_in_binary_units(num_bytes: int, text: str) -> None:
    assert units.size(num_bytes) == text


def test_cpus_from_millicores() -> None:
    assert [units.cpus(m) for m in (2000, 500, 1250, 0)] == ["2", "0.5", "1.25", "0"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (45.4, "45s"),
        (330, "5m"),  # seconds dropped past a minute: the sentence changes once a minute
        (7500, "2h 5m"),
        (7200, "2h"),
        (3 * 86400 + 4 * 3600 + 59, "3d 4h"),
    ],
)
def test_durations_in_two_units(seconds: float, text: str) -> None:
    assert units.duration(seconds) == text


def test_times_relative_to_now() -> None:
    now = 1_795_673_170.0
    assert units.relative(now + 600, now) == "in 10m"
    assert units.relative(now - 90, now) == "1m ago"
    assert units.relative(now + 0.4, now) == "now"
