"""Replica logs as bytes from an offset, and what every executor needs to shape them.

A followed log: the sources stream a log from its start, and a reader that has the first
``offset`` bytes already wants what comes after (``skip_bytes``).

Times: an executor that knows when a log's bytes were written gives *marks*, (offset, Unix
time) pairs in order, each the time of the bytes from its offset up to the next mark (the
local executor notes one per read of the replica's output, the Kubernetes API one per line).
``kiban logs --since`` starts at the first line written since a time, ``--timestamps`` puts each
line's time before it, ``--tail`` starts at the last lines (``tail_start``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime

Mark = tuple[int, float]
"""(offset, Unix time): the log's bytes from ``offset`` on were written at that time (until the
next mark)."""
Read = Callable[[int, int], bytes]
"""``read(offset, limit)``: up to ``limit`` bytes of a log from ``offset``."""
SCAN_BLOCK = 64 * 1024


def skip_bytes(chunks: Iterator[bytes], offset: int) -> Iterator[bytes]:
    """``chunks`` without their first ``offset`` bytes (the source is closed with this)."""
    try:
        for chunk in chunks:
            if offset >= len(chunk):
                offset -= len(chunk)
                continue
            yield chunk[offset:] if offset else chunk
            offset = 0
    finally:
        close_chunks(chunks)


def close_chunks(chunks: Iterator[bytes]) -> None:
    """Close a source of chunks that can be closed (a generator, a streamed response)."""
    close = getattr(chunks, "close", None)
    if close is not None:
        close()


# -- where a view of a log begins ----------------------------------------------------------------
def tail_start(read: Read, size: int, lines: int) -> int:
    """The offset at which the last ``lines`` lines of a log of ``size`` bytes begin (a last line
    without its newline counts as one), read backwards a block at a time."""
    if lines <= 0 or size <= 0:
        return size
    end = size
    if read(size - 1, 1) == b"\n":
        end -= 1  # the newline that ends the last line does not begin one
    found = 0
    while end > 0:
        begin = max(0, end - SCAN_BLOCK)
        block = read(begin, end - begin)
        at = len(block)
        while True:
            at = block.rfind(b"\n", 0, at)
            if at < 0:
                break
            found += 1
            if found == lines:
                return begin + at + 1
        end = begin
    return 0


def line_start_from(read: Read, offset: int) -> int:
    """``offset`` when a line begins there, else where the next line begins (the log's end if
    none does)."""
    if offset <= 0 or read(offset - 1, 1) == b"\n":
        return max(offset, 0)
    position = offset
    while True:
        block = read(position, SCAN_BLOCK)
        if not block:
            return position
        at = block.find(b"\n")
        if at >= 0:
            return position + at + 1
        position += len(block)


def offset_since(marks: Sequence[Mark], when: float, size: int) -> int:
    """The first offset of the bytes written at or after ``when`` (``size`` when none were)."""
    times = [t for _, t in marks]
    at = bisect.bisect_left(times, when)
    return marks[at][0] if at < len(marks) else size


def marks_between(marks: Sequence[Mark], start: int, end: int) -> list[Mark]:
    """The marks that time the bytes ``start`` to ``end``: the last one at or before ``start``
    (when there is one), then those inside."""
    offsets = [o for o, _ in marks]
    first = max(bisect.bisect_right(offsets, start) - 1, 0)
    last = bisect.bisect_left(offsets, end)
    return list(marks[first:last])


# -- showing times -------------------------------------------------------------------------------
def timestamp(when: float) -> str:
    """``when`` as ``kubectl logs --timestamps`` shows it: RFC 3339 in UTC (microseconds)."""
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: str) -> float | None:
    """A Unix time from an RFC 3339 time such as the Kubernetes API puts before log lines
    (``2024-05-01T10:00:00.123456789Z``: nanoseconds are cut to microseconds); None if not one."""
    head, dot, fraction = text.removesuffix("Z").partition(".")
    try:
        moment = datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    digits = fraction[:6] if dot else ""
    if digits and not digits.isdigit():
        return None
    return moment.timestamp() + (int(digits.ljust(6, "0")) / 1e6 if digits else 0.0)


def split_timed(text: bytes) -> tuple[bytes, list[Mark]]:
    """A log whose lines each begin with their time and a space (the Kubernetes API's
    ``timestamps=true``) as the log itself and one mark per line."""
    plain = bytearray()
    marks: list[Mark] = []
    for line in text.splitlines(keepends=True):
        stamp, space, rest = line.partition(b" ")
        when = parse_timestamp(stamp.decode("ascii", "replace")) if space else None
        if when is None:
            plain += line  # not a timed line: kept as it is, timed as the line before
            continue
        marks.append((len(plain), when))
        plain += rest
    return bytes(plain), marks
