"""The local executor's log marks: the shim's relay copies a command's output into its log and
notes when each part was written; ``LogMarks`` finds them again by offset and by time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiban.executors.local import log_index
from kiban.executors.local.log_index import INDEX_FD_ENV, RECORD, LogMarks, Relay, marks_path
from kiban.testing import eventually


class FakeTime:
    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


def test_the_relay_copies_the_output_and_marks_reads_at_most_every_tenth_of_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeTime(1000.0)
    monkeypatch.setattr(log_index, "time", clock)
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"attempt 1 said this\n")  # a log goes on across attempts
    marks = marks_path(log)
    with open(log, "ab") as out, open(marks, "ab") as index:
        relay = Relay(out.fileno(), index.fileno())
        relay.start()
        written = 20
        for when, data in [(1000.0, b"one\n"), (1000.05, b"two\n"), (1000.5, b"three\n")]:
            clock.now = when
            os.write(relay.child_fd, data)
            written += len(data)
            eventually(
                lambda size=written: log.stat().st_size >= size,
                what=f"the relay to copy {data!r} into the log ({written} bytes)",
                interval=0.005,
            )
        relay.command_started()  # the last writer is gone: the copy ends
        relay.finish()
    assert log.read_bytes() == b"attempt 1 said this\none\ntwo\nthree\n"
    found = LogMarks(marks)
    # "two" came 50 ms after "one": timed by its mark; "three" got one of its own
    assert found.between(0, 100) == [(20, 1000.0), (28, 1000.5)]
    assert found.between(24, 27) == [(20, 1000.0)]
    assert found.offset_since(1000.2, 34) == 28
    assert found.offset_since(2000.0, 34) == 34
    assert found.offset_since(0.0, 34) == 20


def test_a_log_without_marks_has_no_times(tmp_path: Path) -> None:
    assert LogMarks(tmp_path / "none.times").between(0, 10) is None
    assert LogMarks(tmp_path / "none.times").offset_since(0.0, 10) is None


def test_marks_are_found_by_binary_search_in_a_long_file(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.times"
    path.write_bytes(b"".join(RECORD.pack(i * 100, 5000.0 + i) for i in range(10_000)))
    marks = LogMarks(path)
    assert marks.offset_since(5000.0 + 4321.5, 10**7) == 432_200
    assert marks.between(432_150, 432_350) == [
        (432_100, 9321.0),
        (432_200, 9322.0),
        (432_300, 9323.0),
    ]


def test_the_shim_relays_its_command_and_keeps_the_descriptor_from_it(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    exit_file = tmp_path / "rank-0.exit"
    script = (
        "import os, sys; print('out', flush=True); print('err', file=sys.stderr, flush=True); "
        "print(os.environ.get('KIBAN_LOG_INDEX_FD'))"
    )
    with open(log, "ab") as out, open(marks_path(log), "ab") as marks:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "kiban.executors.local.shim",
                str(exit_file),
                "--",
                sys.executable,
                "-c",
                script,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, INDEX_FD_ENV: str(marks.fileno())},
            pass_fds=(marks.fileno(),),
            timeout=60,
            check=False,
        )
    assert done.returncode == 0
    assert log.read_text() == "out\nerr\nNone\n"  # both streams; the variable was not passed on
    assert exit_file.read_text().splitlines()[0] == "0"
    found = LogMarks(marks_path(log)).between(0, 100)
    assert found and found[0][0] == 0 and abs(found[0][1] - time.time()) < 60
