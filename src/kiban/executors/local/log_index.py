"""When each part of a local replica's log was written, noted beside the log.

The replica's shim runs its command with its output into a pipe and copies what comes out into
the log (``Relay``); for each read it notes the log's offset and the time, at most one mark per
``MARK_EVERY_S`` (a mark times the bytes up to the next), so a chatty job adds a few bytes a
second beside its log and nothing to its writes but the copy. ``kiban logs --since`` and
``--timestamps`` read the marks (``LogMarks``): ``rank-<R>.times`` beside ``rank-<R>.log``,
16-byte records (offset, time), appended across attempts as the log is.

The executor opens the marks file and hands the shim its descriptor (``INDEX_FD_ENV``), so the
shim needs no right to the job's directory.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
from pathlib import Path
from typing import BinaryIO

from kiban.executors.log_streams import Mark

RECORD = struct.Struct("<Qd")
MARK_EVERY_S = 0.1
"""Bytes read within this long of the last mark are timed by it: marks stay few (ten a second
at most) and a line's time is right to a tenth of a second."""
INDEX_FD_ENV = "KIBAN_LOG_INDEX_FD"
"""The shim's environment: the descriptor of the marks file (the command does not get it)."""
DRAIN_S = 5.0
"""After the command ended, how long the relay copies what processes it left still write."""
READ_SIZE = 64 * 1024


def marks_path(log_path: Path) -> Path:
    """The marks of ``rank-R.log``: ``rank-R.times``."""
    return log_path.with_suffix(".times")


# -- writing: the shim's side ---------------------------------------------------------------------
class Relay:
    """Copies a command's output from a pipe into the log (``log_fd``), marking times in
    ``index_fd``. ``child_fd`` is the pipe's end for the command's stdout and stderr."""

    def __init__(self, log_fd: int, index_fd: int) -> None:
        self.log_fd = log_fd
        self.index_fd = index_fd
        self._read_fd, self.child_fd = os.pipe()
        self._thread = threading.Thread(target=self._copy, name="kiban-log-relay", daemon=True)

    @classmethod
    def from_env(cls, log_fd: int = 1) -> Relay | None:
        """The relay the executor asked for (``INDEX_FD_ENV``), taken out of the environment
        the command inherits; None when it asked for none (the command writes to the log)."""
        value = os.environ.pop(INDEX_FD_ENV, None)
        if value is None or not value.isdigit():
            return None
        return cls(log_fd, int(value))

    def start(self) -> None:
        self._thread.start()

    def command_started(self) -> None:
        """The command has its end of the pipe: ours is closed, so the copy ends at its EOF."""
        os.close(self.child_fd)

    def finish(self, drain_s: float = DRAIN_S) -> None:
        """Wait until the command's output has been copied (its last writer closed the pipe),
        for ``drain_s`` at most (processes the command left behind may hold the pipe)."""
        self._thread.join(drain_s)

    def _copy(self) -> None:
        last_mark = float("-inf")
        try:
            while True:
                data = os.read(self._read_fd, READ_SIZE)
                if not data:
                    return
                now = time.time()
                if now - last_mark >= MARK_EVERY_S:
                    last_mark = now
                    offset = os.fstat(self.log_fd).st_size
                    with contextlib.suppress(OSError):  # a lost mark times less, loses nothing
                        os.write(self.index_fd, RECORD.pack(offset, now))
                view = memoryview(data)
                while view:
                    view = view[os.write(self.log_fd, view) :]
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                os.close(self._read_fd)


# -- reading: the API's side ----------------------------------------------------------------------
class LogMarks:
    """The marks of one log, read from its file as they are needed (binary search)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def offset_since(self, when: float, size: int) -> int | None:
        """The first offset written at or after ``when`` (``size`` if none was); None when the
        log has no marks."""
        try:
            with open(self.path, "rb") as handle:
                count = os.fstat(handle.fileno()).st_size // RECORD.size
                if count == 0:
                    return None
                low, high = 0, count
                while low < high:  # the first record with a time >= when
                    middle = (low + high) // 2
                    if _record(handle, middle)[1] < when:
                        low = middle + 1
                    else:
                        high = middle
                return size if low == count else _record(handle, low)[0]
        except FileNotFoundError:
            return None

    def between(self, start: int, end: int) -> list[Mark] | None:
        """The marks that time the bytes ``start`` to ``end`` (the last at or before ``start``,
        then those inside); None when the log has no marks."""
        try:
            with open(self.path, "rb") as handle:
                count = os.fstat(handle.fileno()).st_size // RECORD.size
                if count == 0:
                    return None
                low, high = 0, count
                while low < high:  # the first record with an offset > start
                    middle = (low + high) // 2
                    if _record(handle, middle)[0] <= start:
                        low = middle + 1
                    else:
                        high = middle
                found: list[Mark] = []
                index = max(low - 1, 0)
                handle.seek(index * RECORD.size)
                while index < count:
                    block = handle.read(min(count - index, 4096) * RECORD.size)
                    if not block:
                        break
                    whole = block[: len(block) // RECORD.size * RECORD.size]
                    for offset, when in RECORD.iter_unpack(whole):
                        if offset >= end and found:
                            return found
                        found.append((offset, when))
                    index += len(block) // RECORD.size
                return found
        except FileNotFoundError:
            return None


def _record(handle: BinaryIO, index: int) -> Mark:
    handle.seek(index * RECORD.size)
    offset, when = RECORD.unpack(handle.read(RECORD.size))
    return int(offset), float(when)
