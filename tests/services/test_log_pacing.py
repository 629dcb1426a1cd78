"""How ``kiban logs -f`` waits on a quiet log: polled ever less often up to once a second, the
job's state read at most once a second, a broken live stream retried only after a while, and
the log read once more after the job has ended. Time is a clock the test moves: nothing sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from kiban.services.logs import FollowClock, JobWatch, follow_log


class SteppedClock(FollowClock):
    """A follow's clock whose waits pass at once, moving its time by what each waited."""

    def __init__(self) -> None:
        super().__init__(asyncio.Event())
        self.t = 0.0
        self.waits: list[float] = []

    def now(self) -> float:
        return self.t

    async def wait(self, seconds: float) -> bool:
        self.waits.append(round(seconds, 6))
        self.t += seconds
        return False


class ScriptedLog:
    """A rank's log whose bytes appear at set times (by the clock); a live stream, if any,
    gives one chunk and breaks off."""

    def __init__(self, clock: SteppedClock, writes: dict[float, bytes], live: bool = False):
        self.clock = clock
        self.writes = sorted(writes.items())
        self.has_live = live
        self.live_asked_at: list[float] = []

    def _written(self) -> bytes:
        return b"".join(data for at, data in self.writes if at <= self.clock.t)

    async def read(self, position: int) -> tuple[bytes, int]:
        data = self._written()[position:]
        return data, position + len(data)

    async def live(self, position: int) -> AsyncIterator[bytes] | None:
        self.live_asked_at.append(round(self.clock.t, 6))
        if not self.has_live:
            return None

        async def broken() -> AsyncIterator[bytes]:
            yield b"live\n"
            raise OSError("connection reset")

        return broken()


def follow(
    log: ScriptedLog, clock: SteppedClock, ends_at: float
) -> tuple[list[tuple[int, bytes]], list[float]]:
    """What a follow of ``log`` yields, and when it read the job's state."""
    state_reads: list[float] = []

    async def read_ended() -> bool:
        state_reads.append(round(clock.t, 6))
        return clock.t >= ends_at

    async def run() -> list[tuple[int, bytes]]:
        watch = JobWatch(False, read_ended, clock.now)
        return [piece async for piece in follow_log(log, 0, follow=True, watch=watch, clock=clock)]

    return asyncio.run(run()), state_reads


def test_a_quiet_log_is_polled_ever_less_often_and_read_once_more_after_the_end() -> None:
    clock = SteppedClock()
    log = ScriptedLog(clock, {0.0: b"start\n", 3.5: b"last words\n"})
    pieces, state_reads = follow(log, clock, ends_at=3.0)
    assert clock.waits == [0.2, 0.3, 0.45, 0.675, 1.0, 1.0]
    assert state_reads == [1.625, 2.625, 3.625]  # at most once a second, not every poll
    assert pieces == [(0, b"start\n"), (6, b"last words\n")]  # written after the end: still read


def test_output_makes_the_next_poll_quick_again() -> None:
    clock = SteppedClock()
    log = ScriptedLog(clock, {0.0: b"a\n", 0.9: b"b\n"})
    pieces, _ = follow(log, clock, ends_at=2.0)
    assert pieces == [(0, b"a\n"), (2, b"b\n")]
    assert clock.waits[:5] == [0.2, 0.3, 0.45, 0.2, 0.3]  # b came at 0.95: back to 0.2


def test_a_broken_live_stream_is_polled_a_while_before_it_is_followed_again() -> None:
    clock = SteppedClock()
    log = ScriptedLog(clock, {}, live=True)
    pieces, _ = follow(log, clock, ends_at=9.0)
    assert [data for _, data in pieces] == [b"live\n"] * len(log.live_asked_at)
    assert log.live_asked_at == [0.0, 5.625]  # the first poll 5 s or more after the break
    assert all(wait <= 1.0 for wait in clock.waits)
