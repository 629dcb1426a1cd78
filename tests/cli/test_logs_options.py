"""``kiban logs``' pieces: ``--since`` as people write it, where a job ran, why it has no output."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, cast

import pytest

from kiban.cli.logs import never_started, parse_since, show_logs, where_ran
from kiban.sdk.client import Client

NOW = datetime(2024, 5, 1, 15, 30)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("10m", timedelta(minutes=10)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(minutes=90)),
        ("2024-05-01T10:00", datetime(2024, 5, 1, 10, 0)),
        ("2024-05-01 10:00:30", datetime(2024, 5, 1, 10, 0, 30)),
        (
            "2024-05-01T10:00:00+09:00",
            datetime(2024, 5, 1, 10, tzinfo=timezone(timedelta(hours=9))),
        ),
        ("10:00", datetime(2024, 5, 1, 10, 0)),
        ("09:15:20", datetime(2024, 5, 1, 9, 15, 20)),
    ],
)
def test_since_takes_durations_and_times(text: str, expected: timedelta | datetime) -> None:
    assert parse_since(text, now=NOW) == expected


@pytest.mark.parametrize("text", ["", "ten minutes", "10", "10x", "-5m", "25:99"])
def test_since_refuses_what_is_neither(text: str) -> None:
    with pytest.raises(ValueError, match="neither a duration"):
        parse_since(text, now=NOW)


def job(**fields: Any) -> dict[str, Any]:
    return {
        "id": "train-abc123",
        "state": "Pending",
        "attempt": 1,
        "startedAt": None,
        "replicas": [],
        "reason": None,
        "message": None,
        **fields,
    }


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"reason": {"code": "NoNodeFits", "message": "no node can hold a replica"}},
            "job train-abc123 has not started: it is Pending (NoNodeFits: no node can hold a "
            "replica)",
        ),
        (
            {"state": "Cancelled"},
            "job train-abc123 was cancelled before it started; it has no output",
        ),
        (
            {"state": "Failed", "message": "command not found: 'trian.py'"},
            "job train-abc123 ended Failed before it started: command not found: 'trian.py'; it "
            "has no output",
        ),
        ({"state": "Succeeded", "startedAt": 1.0}, None),
        ({"state": "Pending", "startedAt": 1.0}, None),  # ran, then went back to its queue
    ],
)
def test_a_job_that_never_started_says_why(fields: dict[str, Any], expected: str | None) -> None:
    assert never_started(job(**fields)) == expected


def test_where_each_replica_ran_is_said_per_rank() -> None:
    replicas = [
        {"task": "worker", "index": i, "rank": i, "node": f"node-{i}", "gpuIds": [0, 1][: i + 1]}
        for i in range(2)
    ]
    running = job(state="Running", attempt=2, replicas=replicas)
    assert where_ran(running, {1}) == [
        "=== kiban: job train-abc123, attempt 2: worker[1] rank 1 on node-1, GPUs 0,1"
    ]
    assert len(where_ran(running, None)) == 2


class PendingThenRunning:
    """A client whose job is Pending when first asked, and running once output comes."""

    def __init__(self) -> None:
        self.asked = 0

    def job(self, job_id: str) -> dict[str, Any]:
        self.asked += 1
        if self.asked == 1:
            return job()
        replica = {"task": "worker", "index": 0, "rank": 0, "node": "node-3", "gpuIds": []}
        return job(state="Running", startedAt=1.0, replicas=[replica])

    def logs(self, job_id: str, **options: Any) -> Iterator[bytes]:
        yield b""
        yield b"line 1\n"
        yield b"line 2\n"


def test_a_follow_that_began_while_pending_says_where_the_job_then_ran(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = PendingThenRunning()
    code = show_logs(
        cast(Client, client),
        "train-abc123",
        rank=0,
        follow=True,
        all_ranks=False,
        tail=None,
        since=None,
        timestamps=False,
    )
    out = capsys.readouterr()
    assert code == 0
    assert out.out == "line 1\nline 2\n"
    assert out.err.splitlines() == [
        "kiban: job train-abc123 has not started: it is Pending; following its output once it runs",
        "=== kiban: job train-abc123, attempt 1: worker[0] rank 0 on node-3, GPUs none",
    ]
