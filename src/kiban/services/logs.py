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
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from anyio.to_thread import run_sync
from sqlalchemy.orm import Session, sessionmaker

from kiban.clock import Clock
from kiban.domain.states import JobState
from kiban.executors.base import Executor, log_source
from kiban.executors.log_streams import Mark, timestamp
from kiban.services import jobs, log_follow
from kiban.services.auth import Principal
from kiban.services.errors import invalid


class LogPlatform(Protocol):
    """What reading a job's logs takes of the platform: its store, executor and clock."""

    @property
    def sessions(self) -> sessionmaker[Session]: ...

    @property
    def executor(self) -> Executor: ...

    @property
    def clock(self) -> Clock: ...


CHUNK = 64 * 1024


@dataclass(frozen=True)
class FollowPacing:
    """How often a followed log is read while nothing comes, and its job's state."""

    poll_first_s: float = 0.2
    """A quiet log is polled after this, then ``growth`` times later each time..."""
    poll_max_s: float = 1.0
    """...up to this."""
    growth: float = 1.5
    retry_live_s: float = 5.0
    """After a live stream broke off (or went quiet too long), how long the log is polled
    before it is followed live again."""
    state_every_s: float = 1.0
    """How often a follow reads its job's state (for all its ranks)."""


PACING = FollowPacing()
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
    platform: LogPlatform,
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
    clock = FollowClock(stopping)

    async def read_ended() -> bool:
        state, _ = await _on_thread(_job_state, platform, principal, job_id)
        return state.terminal

    watch = JobWatch(state.terminal, read_ended, clock.now)
    follows = [
        _Rank(platform, job_id, rank, start, query, watch, clock)
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


def _job_state(platform: LogPlatform, principal: Principal, job_id: str) -> tuple[JobState, int]:
    """The job's state and how many replicas it has (NotFound if the caller may not see it)."""
    with platform.sessions() as session:
        job = jobs.get_visible(session, principal, job_id)
        return JobState(job.state), jobs.job_demand(job).replicas


class JobWatch:
    """Whether a followed job has ended, read at most every ``state_every_s`` (of ``now``) for
    all its ranks; ``read_ended`` reads it."""

    def __init__(
        self,
        ended: bool,
        read_ended: Callable[[], Awaitable[bool]],
        now: Callable[[], float],
        every_s: float = PACING.state_every_s,
    ) -> None:
        self._ended = ended
        self._read_ended = read_ended
        self._now = now
        self._every_s = every_s
        self._read_at = now()
        self._reading: asyncio.Future[bool] | None = None

    async def ended(self) -> bool:
        if self._ended:
            return True
        if self._now() - self._read_at < self._every_s:
            return False
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read_ended())
        reading = self._reading
        try:
            self._ended = await asyncio.shield(reading)
        finally:
            if self._reading is reading and reading.done():
                self._reading = None
                self._read_at = self._now()
        return self._ended


class FollowClock:
    """Time as a follow sees it: ``now`` (the event loop's clock), and ``wait``, which ends
    early when the server stops. Tests give one whose time they move."""

    def __init__(self, stopping: asyncio.Event) -> None:
        self.stopping = stopping

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def wait(self, seconds: float) -> bool:
        """Wait ``seconds``, or less if the server stops meanwhile; whether it is stopping."""
        try:
            await asyncio.wait_for(self.stopping.wait(), seconds)
        except TimeoutError:
            return False
        return True


class RankLog(Protocol):
    """One rank's log as a follow reads it."""

    async def read(self, position: int) -> tuple[bytes, int]:
        """The bytes from ``position`` (up to a chunk) and the position after them."""
        ...

    async def live(self, position: int) -> AsyncIterator[bytes] | None:
        """Its bytes from ``position`` as they are written, or None when there is no stream."""
        ...


async def follow_log(
    log: RankLog,
    start: int,
    *,
    follow: bool,
    watch: JobWatch,
    clock: FollowClock,
    pacing: FollowPacing = PACING,
) -> AsyncIterator[tuple[int, bytes]]:
    """(offset, bytes) of the log from ``start``; with ``follow``, until the job has ended and
    all its log was read, or the server stops.

    While nothing comes, the log is followed live where it has a stream, else polled ever less
    often (``pacing``); a live stream that breaks off is polled ``retry_live_s`` before it is
    followed again. After the job has ended its log is read once more: its last output.
    """
    position = start
    pause = pacing.poll_first_s
    follow_from = clock.now()
    ended = False
    while True:
        data, after = await log.read(position)
        if data:
            yield position, data
            position = after
            pause = pacing.poll_first_s
            continue
        if not follow or ended or clock.stopping.is_set():
            return
        if clock.now() >= follow_from:
            streamed = await log.live(position)
            if streamed is not None:
                try:
                    async for chunk in _until(clock.stopping, streamed):
                        yield position, chunk
                        position += len(chunk)
                    pause = pacing.poll_first_s
                except Exception:  # the stream broke off, or went quiet too long
                    follow_from = clock.now() + pacing.retry_live_s
        if await clock.wait(pause):
            return
        pause = min(pause * pacing.growth, pacing.poll_max_s)
        ended = await watch.ended()


class _Rank:
    """One rank's log from ``start``: its bytes (``chunks``), then shaped (``shaped``)."""

    def __init__(
        self,
        platform: LogPlatform,
        job_id: str,
        rank: int,
        start: int,
        query: LogQuery,
        watch: JobWatch,
        clock: FollowClock,
    ) -> None:
        self.logs = log_source(platform.executor)
        self.job_id = job_id
        self.rank = rank
        self.start = start
        self.query = query
        self.watch = watch
        self.clock = clock

    async def read(self, position: int) -> tuple[bytes, int]:
        return await _on_thread(self.logs.read_log, self.job_id, self.rank, position, CHUNK)

    async def live(self, position: int) -> AsyncIterator[bytes] | None:
        stream = await _on_thread(self.logs.follow_log, self.job_id, self.rank, position)
        return None if stream is None else log_follow.follow(stream)

    def chunks(self) -> AsyncIterator[tuple[int, bytes]]:
        """(offset, bytes) of the log from ``start``; with ``follow``, until the job has
        ended and all its log was read (or the server stops)."""
        return follow_log(
            self, self.start, follow=self.query.follow, watch=self.watch, clock=self.clock
        )

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
