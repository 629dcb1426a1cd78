"""A job's logs as ``kiban logs`` asks for them: one rank or all of them, from where the reader
is, its last lines or those written since a time, each line after its time (``--timestamps``)
and its rank (``--all-ranks``), to the end or followed until the job has ended.

Following costs no store connection and no worker thread while it waits: each rank's log is
read a chunk at a time on a worker thread, polled ever less often while nothing comes (up to
once a second), and read as a live stream where the executor has one (on a thread of its own,
``kiban.services.log_follow``); the job's state is read at most once a second for all the ranks of a
follow, each time in a session of its own. When the server stops, follows end at once.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from anyio.to_thread import run_sync

from kiban.domain.states import JobState
from kiban.executors.base import log_source
from kiban.executors.log_streams import Mark, timestamp
from kiban.services import jobs, log_follow
from kiban.services.auth import Principal
from kiban.services.errors import invalid

if TYPE_CHECKING:
    from kiban.platform import Platform

CHUNK = 64 * 1024
FOLLOW_RETRY_S = 5.0
"""After a followed log broke off (or went quiet too long), how long it is polled before it is
followed again."""
POLL_FIRST_S = 0.2
POLL_MAX_S = 1.0
"""A quiet log is polled after ``POLL_FIRST_S``, then half as often again each time, up to this."""
STATE_EVERY_S = 1.0
"""How often a follow reads its job's state (for all its ranks)."""
T = TypeVar("T")
R = TypeVar("R")


async def _on_thread(call: Callable[..., R], *args: object) -> R:
    """``call(*args)`` on one of the worker threads (anyio's), off the event loop."""
    result: R = await run_sync(call, *args)
    return result


@dataclass(frozen=True)
class LogQuery:
    """What part of a job's logs is asked for, and how each line is shown."""

    rank: int = 0
    all_ranks: bool = False
    follow: bool = False
    offset: int = 0
    tail_lines: int | None = None
    since_seconds: float | None = None
    since_time: float | None = None
    timestamps: bool = False


async def open_logs(
    platform: Platform,
    principal: Principal,
    job_id: str,
    query: LogQuery,
    stopping: asyncio.Event,
) -> AsyncIterator[bytes]:
    """The asked part of the job's logs, checked first (NotFound when the caller may not see
    the job, InvalidInput naming the field the job or its executor cannot honour)."""
    state, total = await _on_thread(_job_state, platform, principal, job_id)
    ranks = _ranks(query, total, job_id)
    since = query.since_time
    if query.since_seconds is not None:
        since = platform.clock.now() - query.since_seconds
    executor = platform.executor
    logs = log_source(executor)
    starts: list[int] = []
    for rank in ranks:
        start = 0
        if query.tail_lines is not None or since is not None:
            found = await _on_thread(
                lambda r=rank: logs.log_start(job_id, r, tail_lines=query.tail_lines, since=since)
            )
            if found is None:
                field = "since_time" if query.since_time is not None else "since_seconds"
                raise invalid(
                    field, f"the {executor.name} executor does not know when this log was written"
                )
            start = found
        starts.append(max(start, query.offset))
    watch = JobWatch(platform, principal, job_id, state)
    follows = [
        _Rank(platform, job_id, rank, start, query, watch, stopping)
        for rank, start in zip(ranks, starts, strict=True)
    ]
    if len(follows) == 1:
        return follows[0].shaped()
    if query.follow:
        return _merged([f.shaped() for f in follows])
    return _one_after_another([f.shaped for f in follows])


def _ranks(query: LogQuery, total: int, job_id: str) -> list[int]:
    count = max(total, 1)
    if query.all_ranks:
        if query.offset:
            raise invalid("offset", "an offset is for one rank's log, not with all_ranks")
        return list(range(count))
    if query.rank >= count:
        raise invalid("rank", f"job {job_id} has ranks 0 to {count - 1}")
    return [query.rank]


def _job_state(platform: Platform, principal: Principal, job_id: str) -> tuple[JobState, int]:
    """The job's state and how many replicas it has (NotFound if the caller may not see it)."""
    with platform.sessions() as session:
        job = jobs.get_visible(session, principal, job_id)
        return JobState(job.state), jobs.requested(job.spec)[0]


class JobWatch:
    """Whether a followed job has ended, read at most every ``STATE_EVERY_S`` for all ranks."""

    def __init__(
        self, platform: Platform, principal: Principal, job_id: str, state: JobState
    ) -> None:
        self.platform = platform
        self.principal = principal
        self.job_id = job_id
        self._ended = state.terminal
        self._read_at = asyncio.get_running_loop().time()
        self._reading: asyncio.Future[bool] | None = None

    async def ended(self) -> bool:
        if self._ended:
            return True
        loop = asyncio.get_running_loop()
        if loop.time() - self._read_at < STATE_EVERY_S:
            return False
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read())
        reading = self._reading
        try:
            self._ended = await asyncio.shield(reading)
        finally:
            if self._reading is reading and reading.done():
                self._reading = None
                self._read_at = loop.time()
        return self._ended

    async def _read(self) -> bool:
        state, _ = await _on_thread(_job_state, self.platform, self.principal, self.job_id)
        return state.terminal


class _Rank:
    """One rank's log from ``start``: its bytes (``chunks``), then shaped (``shaped``)."""

    def __init__(
        self,
        platform: Platform,
        job_id: str,
        rank: int,
        start: int,
        query: LogQuery,
        watch: JobWatch,
        stopping: asyncio.Event,
    ) -> None:
        self.logs = log_source(platform.executor)
        self.job_id = job_id
        self.rank = rank
        self.start = start
        self.query = query
        self.watch = watch
        self.stopping = stopping

    async def chunks(self) -> AsyncIterator[tuple[int, bytes]]:
        """(offset, bytes) of the log from ``start``; with ``follow``, until the job has
        ended and all its log was read (or the server stops)."""
        logs, job_id, rank = self.logs, self.job_id, self.rank
        position = self.start
        pause = POLL_FIRST_S
        loop = asyncio.get_running_loop()
        follow_from = 0.0  # after a live stream broke off, poll a while before the next
        ended = False
        while True:
            data, after = await _on_thread(logs.read_log, job_id, rank, position, CHUNK)
            if data:
                yield position, data
                position = after
                pause = POLL_FIRST_S
                continue
            if not self.query.follow or ended or self.stopping.is_set():
                return
            if loop.time() >= follow_from:
                live = await _on_thread(logs.follow_log, job_id, rank, position)
                streamed = None if live is None else log_follow.follow(live)
                if streamed is not None:
                    try:
                        async for chunk in _until(self.stopping, streamed):
                            yield position, chunk
                            position += len(chunk)
                        pause = POLL_FIRST_S
                    except Exception:  # broke off, or quiet too long: poll, then again
                        follow_from = loop.time() + FOLLOW_RETRY_S
            if await _stopped_within(self.stopping, pause):
                return
            pause = min(pause * 1.5, POLL_MAX_S)
            ended = await self.watch.ended()  # then read once more: its last output

    async def shaped(self) -> AsyncIterator[bytes]:
        """The bytes as asked: as they are, or line by line after the rank and the time."""
        label = f"[rank {self.rank}] ".encode() if self.query.all_ranks else b""
        if not label and not self.query.timestamps:
            async for _, data in self.chunks():
                yield data
            return
        pending = b""
        pending_at = self.start
        for_times: list[Mark] | None = None
        async for offset, data in self.chunks():
            text = pending + data
            if self.query.timestamps:
                for_times = await _on_thread(
                    self.logs.log_times, self.job_id, self.rank, pending_at, offset + len(data)
                )
            *lines, pending = text.split(b"\n")
            out = bytearray()
            at = pending_at
            offsets = [o for o, _ in for_times] if for_times else []
            for line in lines:
                out += label + _time_of(for_times, offsets, at) + line + b"\n"
                at += len(line) + 1
            pending_at = at
            if out:
                yield bytes(out)
        if pending:
            ending = b"\n" if label else b""  # the next rank's lines begin on a line of their own
            offsets = [o for o, _ in for_times] if for_times else []
            yield label + _time_of(for_times, offsets, pending_at) + pending + ending


def _time_of(marks: list[Mark] | None, offsets: list[int], offset: int) -> bytes:
    """The time of the line at ``offset`` (``offsets``: the marks') and a space, or nothing
    when it is not known."""
    if not marks:
        return b""
    at = bisect.bisect_right(offsets, offset) - 1
    if at < 0:
        return b""
    return timestamp(marks[at][1]).encode() + b" "


async def _one_after_another(
    streams: list[Callable[[], AsyncIterator[bytes]]],
) -> AsyncIterator[bytes]:
    for stream in streams:
        async for piece in stream():
            yield piece


async def _merged(streams: list[AsyncIterator[bytes]]) -> AsyncIterator[bytes]:
    """The pieces of ``streams`` (whole lines each) as they come, until all have ended."""
    queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(2 * len(streams))

    async def pump(stream: AsyncIterator[bytes]) -> None:
        try:
            async for piece in stream:
                await queue.put(piece)
        except Exception as exc:
            await queue.put(exc)
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(pump(stream)) for stream in streams]
    try:
        running = len(tasks)
        while running:
            piece = await queue.get()
            if piece is None:
                running -= 1
            elif isinstance(piece, BaseException):
                raise piece
            else:
                yield piece
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _stopped_within(stopping: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds``, or less if the server stops meanwhile; whether it is stopping."""
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def _until(stopping: asyncio.Event, items: AsyncIterator[T]) -> AsyncIterator[T]:
    """``items`` until they end or the server stops (the one awaited then is cancelled)."""
    stop = asyncio.ensure_future(stopping.wait())
    try:
        while True:
            following = asyncio.ensure_future(anext(items))
            await asyncio.wait({following, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                following.cancel()
                return
            try:
                item = following.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        stop.cancel()
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()
