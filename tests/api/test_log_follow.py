"""``kiban logs -f`` of a live replica whose executor streams its log (Kubernetes): one stream
from where the reader is, polling again when it breaks off, and its reader thread gone after."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban.executors.log_streams import skip_bytes
from kiban.platform import Platform
from kiban.services import log_follow
from kiban.testing import FakeExecutor, eventually, manifest, submit


def wait_for_no_followers() -> None:
    eventually(
        lambda: log_follow.followers() == 0,
        what="every log follower's reader thread to end",
        timeout=5,
        interval=0.01,
    )


def follow_until(
    api: TestClient, job_id: str, end: bytes, then: Any, params: dict[str, str] | None = None
) -> bytes:
    """Read ``logs -f`` to its end; once the output ends with ``end``, call ``then()``."""
    got = b""
    url = f"/api/v1/jobs/{job_id}/logs"
    with api.stream("GET", url, params={"follow": "true", **(params or {})}) as response:
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            got += chunk
            if then is not None and got.endswith(end):
                then()
                then = None
    return got


def test_a_live_log_is_followed_from_where_the_reader_is(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit(api, manifest())["id"]
    platform.loop.run_once()
    executor.replicas[(job_id, 1, 0)].log.extend(b"0123")
    executor.streams[(job_id, 0)] = [b"01", b"23new", b" and more"]

    def replica_ends() -> None:
        executor.streams.pop((job_id, 0))
        executor.finish(job_id, 0, 0)
        platform.loop.run_once()

    assert follow_until(api, job_id, b"more", replica_ends) == b"0123new and more"
    assert executor.follows[0] == (job_id, 0, 4)  # read first, then followed past those bytes
    wait_for_no_followers()


def test_a_stream_that_breaks_off_is_polled_on(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit(api, manifest())["id"]
    platform.loop.run_once()
    replica = executor.replicas[(job_id, 1, 0)]
    replica.log.extend(b"0123")
    executor.streams[(job_id, 0)] = [b"0123ab", ConnectionResetError("the node went away")]

    def more_then_end() -> None:
        replica.log.extend(b"abcd")  # what polling reads after the break
        executor.finish(job_id, 0, 0)
        platform.loop.run_once()

    assert follow_until(api, job_id, b"ab", more_then_end) == b"0123abcd"
    assert len(executor.follows) == 1  # not followed again at once after it broke
    wait_for_no_followers()


def test_without_a_stream_logs_follow_polls_as_before(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    job_id = submit(api, manifest())["id"]
    platform.loop.run_once()
    replica = executor.replicas[(job_id, 1, 0)]
    replica.log.extend(b"step 1\n")

    def more_then_end() -> None:
        replica.log.extend(b"step 2\n")
        executor.finish(job_id, 0, 0)
        platform.loop.run_once()

    assert follow_until(api, job_id, b"step 1\n", more_then_end) == b"step 1\nstep 2\n"
    assert executor.follows == []


# -- the pieces ------------------------------------------------------------------------------
class Source:
    """Chunks, recording whether it was closed."""

    def __init__(self, *chunks: bytes, hold: threading.Event | None = None) -> None:
        self.chunks = list(chunks)
        self.hold = hold
        self.reading = threading.Event()  # a reader is in next()
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        self.reading.set()
        if self.hold is not None:
            self.hold.wait(5)
        if not self.chunks:
            raise StopIteration
        return self.chunks.pop(0)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    ("offset", "expected"),
    [(0, [b"abc", b"de", b"f"]), (2, [b"c", b"de", b"f"]), (3, [b"de", b"f"]), (4, [b"e", b"f"])],
)
def test_skip_bytes_drops_the_first_bytes_across_chunks(offset: int, expected: list[bytes]) -> None:
    source = Source(b"abc", b"de", b"f")
    assert list(skip_bytes(source, offset)) == expected
    assert source.closed


def test_a_reader_closes_its_source_when_the_consumer_leaves_early() -> None:
    source = Source(b"one", b"two", b"three")

    async def first_only() -> bytes:
        chunks = log_follow.follow(source)
        assert chunks is not None
        async for chunk in chunks:
            await chunks.aclose()  # type: ignore[attr-defined]  # the client went away
            return chunk
        return b""

    assert asyncio.run(first_only()) == b"one"
    wait_for_no_followers()
    assert source.closed and source.chunks == [b"two", b"three"]  # nothing read ahead


def test_past_the_limit_nothing_is_followed_and_the_source_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(log_follow, "MAX_FOLLOWERS", 0)
    source = Source(b"x")
    assert log_follow.follow(source) is None
    assert source.closed and log_follow.followers() == 0


def test_a_reader_not_asked_for_a_while_stops_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that stops reading holds its stream at most ``IDLE_S``; asking after that ends
    in an error the endpoint answers by polling, never in a wait for nobody."""
    monkeypatch.setattr(log_follow, "IDLE_S", 0.2)
    source = Source(b"one", b"two")

    async def slow_consumer() -> list[bytes]:
        chunks = log_follow.follow(source)
        assert chunks is not None
        got = []
        with pytest.raises(TimeoutError, match=r"not read for 0\.2 s"):
            async for chunk in chunks:
                got.append(chunk)
                await asyncio.sleep(0.6)  # the client reads nothing meanwhile
        return got

    assert asyncio.run(asyncio.wait_for(slow_consumer(), 5)) == [b"one"]
    wait_for_no_followers()
    assert source.closed


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_client_gone_while_a_read_waits_leaves_no_error_behind() -> None:
    hold = threading.Event()
    source = Source(b"one", hold=hold)

    async def leave_while_waiting() -> None:
        chunks = log_follow.follow(source)
        assert chunks is not None
        waiting = asyncio.ensure_future(chunks.__anext__())
        assert await asyncio.to_thread(source.reading.wait, 5)  # the reader is in next(), held
        waiting.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await chunks.aclose()  # type: ignore[attr-defined]

    asyncio.run(leave_while_waiting())
    hold.set()
    wait_for_no_followers()
    assert source.closed
