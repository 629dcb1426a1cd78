"""``GET /jobs/{id}/logs`` as ``kiban logs`` asks: the last lines, the lines since a time, each
after its time, every rank's after ``[rank R]``, driven by the fake executor (whose logs carry
the times tests give them)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban.platform import Platform
from kiban.testing import FakeExecutor, ManualClock, manifest, submit

T0 = 1714557600.0  # 2024-05-01T10:00:00Z
STAMP = "2024-05-01T10:00:{:02d}.000000Z"


@pytest.fixture
def job_id(api: TestClient, platform: Platform, executor: FakeExecutor) -> str:
    """A running two-replica job whose ranks wrote three timed parts each."""
    job: str = submit(api, manifest(replicas=2, gpu=0))["id"]
    platform.loop.run_once()
    for rank in (0, 1):
        executor.write_log(job, rank, f"r{rank} a\nr{rank} b\n".encode(), T0)
        executor.write_log(job, rank, f"r{rank} c\n".encode(), T0 + 5)
        executor.write_log(job, rank, f"r{rank} d\nr{rank} e".encode(), T0 + 9)  # e: no newline
    return job


def logs(api: TestClient, job_id: str, **params: Any) -> str:
    answer = api.get(f"/api/v1/jobs/{job_id}/logs", params=params)
    assert answer.status_code == 200, answer.text
    return answer.text


def test_the_whole_log_is_as_written(api: TestClient, job_id: str) -> None:
    assert logs(api, job_id) == "r0 a\nr0 b\nr0 c\nr0 d\nr0 e"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"tail": 1}, "r1 e"),
        ({"tail": 2}, "r1 d\nr1 e"),
        ({"tail": 0}, ""),
        ({"tail": 99}, "r1 a\nr1 b\nr1 c\nr1 d\nr1 e"),
        ({"since_time": T0 + 5}, "r1 c\nr1 d\nr1 e"),
        ({"since_time": T0 + 4}, "r1 c\nr1 d\nr1 e"),
        ({"since_time": T0 + 6}, "r1 d\nr1 e"),
        ({"since_time": T0 + 60}, ""),
        ({"since_time": T0 + 5, "tail": 1}, "r1 e"),  # the later of the two starts
        ({"since_time": T0 + 9, "tail": 4}, "r1 d\nr1 e"),
    ],
)
def test_the_last_lines_and_the_lines_since_a_time(
    api: TestClient, job_id: str, params: dict[str, Any], expected: str
) -> None:
    assert logs(api, job_id, rank=1, **params) == expected


def test_since_seconds_counts_back_from_the_servers_clock(
    api: TestClient, job_id: str, clock: ManualClock
) -> None:
    clock.advance(T0 + 12 - clock.now())
    assert logs(api, job_id, since_seconds=4) == "r0 d\nr0 e"


def test_since_seconds_and_since_time_together_are_refused(
    api: TestClient, job_id: str, clock: ManualClock
) -> None:
    """Which was meant cannot be told (since_seconds won silently before)."""
    clock.advance(T0 + 12 - clock.now())
    answer = api.get(
        f"/api/v1/jobs/{job_id}/logs", params={"since_seconds": 4, "since_time": T0 + 5}
    )
    assert answer.status_code == 422, answer.text
    assert [p["field"] for p in answer.json()["error"]["problems"]] == ["since_time"]


def test_timestamps_put_each_lines_time_before_it(api: TestClient, job_id: str) -> None:
    lines = logs(api, job_id, timestamps=True, tail=4).split("\n")
    assert lines == [
        f"{STAMP.format(0)} r0 b",
        f"{STAMP.format(5)} r0 c",
        f"{STAMP.format(9)} r0 d",
        f"{STAMP.format(9)} r0 e",
    ]


def test_all_ranks_prefix_each_line_with_its_rank(api: TestClient, job_id: str) -> None:
    text = logs(api, job_id, all_ranks=True, timestamps=True, since_time=T0 + 9)
    assert text.splitlines() == [
        f"[rank 0] {STAMP.format(9)} r0 d",
        f"[rank 0] {STAMP.format(9)} r0 e",
        f"[rank 1] {STAMP.format(9)} r1 d",
        f"[rank 1] {STAMP.format(9)} r1 e",
    ]


def test_all_ranks_are_followed_until_the_job_ends(
    api: TestClient, platform: Platform, executor: FakeExecutor, job_id: str
) -> None:
    """Lines are shown whole: a last line without its newline waits for it, or for the end."""
    url = f"/api/v1/jobs/{job_id}/logs"
    params = {"all_ranks": "true", "follow": "true", "tail": "1"}
    with api.stream("GET", url, params=params) as response:
        assert response.status_code == 200
        executor.write_log(job_id, 1, b" more\n", T0 + 20)  # r1's last line ends
        for rank in (0, 1):
            executor.finish(job_id, rank, 0)
        platform.loop.run_once()
        got = response.read().decode()
    assert sorted(got.splitlines()) == ["[rank 0] r0 e", "[rank 1] r1 e more"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"all_ranks": True, "offset": 3}, "offset"),
        ({"since_time": T0, "rank": 0}, "since_time"),
        ({"since_seconds": 10, "rank": 0}, "since_seconds"),
        ({"rank": 2}, "rank"),
        ({"tail": -1}, "tail"),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_the_field(
    api: TestClient, platform: Platform, executor: FakeExecutor, params: dict[str, Any], field: str
) -> None:
    job = submit(api, manifest(replicas=2, gpu=0))["id"]
    platform.loop.run_once()
    executor.replicas[(job, 1, 0)].log.extend(b"written without a time\n")
    answer = api.get(f"/api/v1/jobs/{job}/logs", params=params)
    assert answer.status_code == 422, answer.text
    assert [p["field"] for p in answer.json()["error"]["problems"]] == [field]
