"""Where a view of a log begins (its last lines, its lines since a time) and how times are read
and shown: the pieces every executor's ``log_start`` and ``log_times`` are made of."""

from __future__ import annotations

import pytest

from kiban.executors import log_streams
from kiban.executors.log_streams import (
    line_start_from,
    marks_between,
    offset_since,
    parse_timestamp,
    split_timed,
    tail_start,
    timestamp,
)


def reader(log: bytes) -> log_streams.Read:
    return lambda offset, limit: log[offset : offset + limit]


@pytest.mark.parametrize(
    ("log", "lines", "expected"),
    [
        (b"a\nb\nc\n", 1, b"c\n"),
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc\n", 3, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
        (b"a\nb\nc", 1, b"c"),  # a last line without its newline is a line
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\n\n\nb\n", 2, b"\nb\n"),  # empty lines count
        (b"", 5, b""),
        (b"a\nb\n", 0, b""),
    ],
)
def test_tail_start(log: bytes, lines: int, expected: bytes) -> None:
    assert log[tail_start(reader(log), len(log), lines) :] == expected


def test_tail_start_reads_back_across_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_streams, "SCAN_BLOCK", 7)
    log = b"".join(b"line %d\n" % i for i in range(100))
    assert log[tail_start(reader(log), len(log), 3) :] == b"line 97\nline 98\nline 99\n"


@pytest.mark.parametrize(
    ("offset", "expected"),
    [(0, 0), (4, 4), (5, 8), (7, 8), (9, 11), (11, 11)],
)
def test_line_start_from(offset: int, expected: int) -> None:
    log = b"one\ntwo\nend"  # lines begin at 0, 4, 8; the log ends at 11
    assert line_start_from(reader(log), offset) == expected


MARKS = [(0, 100.0), (10, 101.0), (25, 105.0)]


@pytest.mark.parametrize(
    ("when", "expected"), [(99.0, 0), (100.0, 0), (100.5, 10), (105.0, 25), (106.0, 40)]
)
def test_offset_since(when: float, expected: int) -> None:
    assert offset_since(MARKS, when, 40) == expected


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, 5, [(0, 100.0)]),
        (12, 30, [(10, 101.0), (25, 105.0)]),
        (30, 40, [(25, 105.0)]),
        (0, 40, MARKS),
    ],
)
def test_marks_between(start: int, end: int, expected: list[tuple[int, float]]) -> None:
    assert marks_between(MARKS, start, end) == expected


def test_times_are_shown_and_read_as_kubectl_shows_them() -> None:
    assert timestamp(1714557600.25) == "2024-05-01T10:00:00.250000Z"
    assert parse_timestamp("2024-05-01T10:00:00.250000123Z") == pytest.approx(1714557600.25)
    assert parse_timestamp("2024-05-01T10:00:00Z") == 1714557600.0
    assert parse_timestamp("not a time") is None


def test_a_timed_log_becomes_the_log_and_a_mark_per_line() -> None:
    timed = (
        b"2024-05-01T10:00:00.000000000Z step 1\n"
        b"2024-05-01T10:00:02.500000000Z step 2\n"
        b"2024-05-01T10:00:03.000000000Z \n"
    )
    plain, marks = split_timed(timed)
    assert plain == b"step 1\nstep 2\n\n"
    assert marks == [(0, 1714557600.0), (7, 1714557602.5), (14, 1714557603.0)]
