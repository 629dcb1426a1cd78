"""Trace files: the Philly job file and the generic CSV, read into one record type.

Bad input is refused with the file, line and column at fault, so a 100,000-row trace with one
broken row says which. Times are seconds; the Philly file's local-time strings are read as
naive times (only differences matter). ``cut_window`` and ``compress`` are the ``--window``
and ``--load`` transforms, applied in that order: the window is cut on the trace's own clock.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, TypeVar

from kiban.domain.quantity import parse_duration

TraceFormat = Literal["philly", "csv"]
_T = TypeVar("_T")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
CSV_REQUIRED = ("submit_time", "duration", "gpus", "tenant")
CSV_OPTIONAL = ("priority", "nodes", "gpus_per_node", "time_limit", "user")


class TraceError(ValueError):
    """A trace (or a file beside it) that cannot be read; the message names file, line, column."""


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One job of a trace: when it was submitted, how long it ran, on how many GPUs, whose.

    ``priority`` is as written (a number or a priority class name; None: the default class);
    ``nodes`` x ``gpus_per_node`` is its shape when the trace gives one; ``time_limit_s`` its
    maxRuntime when the trace has one (None: none, as in the Philly file); ``user`` the member
    of its tenant who submitted it (None: the trace has no users), fair share's second level.
    """

    line: int
    submit_s: float
    duration_s: float
    gpus: int
    tenant: str
    priority: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    time_limit_s: float | None = None
    user: str | None = None


def load_trace(path: Path, fmt: TraceFormat | None = None) -> list[TraceRecord]:
    """The file's jobs in submit order (file order among equal times); format from its header."""
    fmt = fmt or sniff_format(path)
    loader = load_philly if fmt == "philly" else load_csv
    return loader(path)


def sniff_format(path: Path) -> TraceFormat:
    """``philly`` when the header has the Philly columns, else ``csv``."""
    header = next(_rows(path), None)
    if header is not None and set(PHILLY_COLUMNS) <= set(header[1]):
        return "philly"
    return "csv"


def load_philly(path: Path) -> list[TraceRecord]:
    """``philly_jobs_sia.csv``: timestamp, duration, num_gpus, gpu_time, cluster (the team)."""
    records = [
        TraceRecord(
            line=line,
            submit_s=cell("timestamp", _timestamp),
            duration_s=cell("duration", _positive_seconds),
            gpus=cell("num_gpus", _gpus),
            tenant=cell("cluster", _name),
        )
        for line, cell in _cells(path, PHILLY_COLUMNS, ())
    ]
    return _sorted(path, records)


def load_csv(path: Path) -> list[TraceRecord]:
    """``submit_time, duration, gpus, tenant`` and optional ``priority, nodes, gpus_per_node,
    time_limit, user`` (the member of the tenant who submitted the job). Times are seconds (or
    ISO timestamps for ``submit_time``); durations are seconds or ``90s``, ``2h``, ``1h30m``
    forms."""
    records: list[TraceRecord] = []
    for line, cell in _cells(path, CSV_REQUIRED, CSV_OPTIONAL):
        record = TraceRecord(
            line=line,
            submit_s=cell("submit_time", _time),
            duration_s=cell("duration", _positive_seconds),
            gpus=cell("gpus", _gpus),
            tenant=cell("tenant", _name),
            priority=cell("priority", _optional(_name)),
            nodes=cell("nodes", _optional(_gpus)),
            gpus_per_node=cell("gpus_per_node", _optional(_gpus)),
            time_limit_s=cell("time_limit", _optional(_positive_seconds)),
            user=cell("user", _optional(_user)),
        )
        if (record.nodes is None) != (record.gpus_per_node is None):
            raise TraceError(f"{path}, line {line}: give both nodes and gpus_per_node, or neither")
        if record.nodes is not None and record.nodes * (record.gpus_per_node or 0) != record.gpus:
            raise TraceError(
                f"{path}, line {line}: nodes x gpus_per_node = "
                f"{record.nodes * (record.gpus_per_node or 0)}, but gpus = {record.gpus}"
            )
        records.append(record)
    return _sorted(path, records)


# -- transforms ----------------------------------------------------------------------------------
def parse_window(text: str) -> tuple[float | None, float | None]:
    """``START:END`` in seconds or durations from the trace's first submission (``7d:14d``,
    ``:30d``, ``86400:``); an empty side is open."""
    start_text, sep, end_text = text.partition(":")
    if not sep:
        raise ValueError(f"--window {text!r}: write START:END, e.g. 7d:14d or :30d")
    try:
        start = parse_duration(start_text) if start_text.strip() else None
        end = parse_duration(end_text) if end_text.strip() else None
    except ValueError as exc:
        raise ValueError(f"--window {text!r}: {exc}") from None
    if start is not None and end is not None and end <= start:
        raise ValueError(f"--window {text!r}: the end must come after the start")
    return start, end


def cut_window(
    records: Sequence[TraceRecord], start: float | None, end: float | None
) -> list[TraceRecord]:
    """The jobs submitted in ``[start, end)`` seconds after the trace's first submission."""
    if not records:
        return []
    origin = records[0].submit_s
    lo = -math.inf if start is None else origin + start
    hi = math.inf if end is None else origin + end
    return [r for r in records if lo <= r.submit_s < hi]


def compress(records: Sequence[TraceRecord], load: float) -> list[TraceRecord]:
    """Inter-arrival times divided by ``load`` (2: twice the jobs per hour), from the first job."""
    if load <= 0 or not math.isfinite(load):
        raise ValueError("--load must be a positive number")
    if not records or load == 1:
        return list(records)
    origin = records[0].submit_s
    return [replace(r, submit_s=origin + (r.submit_s - origin) / load) for r in records]


# -- reading -------------------------------------------------------------------------------------
def _rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    try:
        with path.open(newline="") as f:
            for line, row in enumerate(csv.reader(f), start=1):
                if row and any(c.strip() for c in row):
                    yield line, row
    except OSError as exc:
        raise TraceError(f"cannot read the trace {path}: {exc.strerror or exc}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: not a CSV file ({exc})") from None


def _cells(
    path: Path, required: Sequence[str], optional: Sequence[str]
) -> Iterator[tuple[int, _CellReader]]:
    """Each data row, as a reader of its cells by column name that names what is wrong."""
    rows = _rows(path)
    first = next(rows, None)
    if first is None:
        raise TraceError(f"{path}: empty; expected a header with {', '.join(required)}")
    header_line, header = first
    names = [h.strip() for h in header]
    missing = [c for c in required if c not in names]
    if missing:
        raise TraceError(
            f"{path}, line {header_line}: no column {', '.join(missing)} "
            f"(the header has {', '.join(names)})"
        )
    known = set(required) | set(optional)
    if optional:  # the generic format: an unknown column is most likely a typo
        unknown = [n for n in names if n not in known]
        if unknown:
            raise TraceError(
                f"{path}, line {header_line}: unknown column {', '.join(unknown)}; "
                f"the columns are {', '.join(required)} and optionally {', '.join(optional)}"
            )
    index = {name: i for i, name in enumerate(names) if name in known}
    for line, row in rows:
        if len(row) != len(names):
            raise TraceError(
                f"{path}, line {line}: {len(row)} fields where the header has {len(names)}"
            )
        yield line, _CellReader(path, line, row, index)


class _CellReader:
    """Reads one row's cells by column, converting each and naming the cell when it fails."""

    __slots__ = ("index", "line", "path", "row")

    def __init__(self, path: Path, line: int, row: list[str], index: dict[str, int]) -> None:
        self.path, self.line, self.row, self.index = path, line, row, index

    def __call__(self, column: str, convert: Callable[[str], _T]) -> _T:
        i = self.index.get(column)
        text = "" if i is None else self.row[i].strip()
        try:
            return convert(text)
        except ValueError as exc:
            raise TraceError(
                f"{self.path}, line {self.line}, column {column}: {exc} (got {text!r})"
            ) from None


def _sorted(path: Path, records: list[TraceRecord]) -> list[TraceRecord]:
    if not records:
        raise TraceError(f"{path}: no jobs")
    return sorted(records, key=lambda r: (r.submit_s, r.line))


def _timestamp(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("not a timestamp like 2017-10-09 07:01:55") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _time(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return _timestamp(text)
    if not math.isfinite(value):
        raise ValueError("not a finite number of seconds")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = parse_duration(text)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError("must be a positive number of seconds")
    return value


def _gpus(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("not a whole number") from None
    if not value.is_integer() or value < 1:
        raise ValueError("must be a whole number of at least 1")
    return int(value)


def _name(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text


def _user(text: str) -> str:
    if len(text) > 128 or not text.isprintable():
        raise ValueError("must be at most 128 printable characters")
    return text


def _optional(convert: Callable[[str], _T]) -> Callable[[str], _T | None]:
    def read(text: str) -> _T | None:
        return None if text == "" else convert(text)

    return read
