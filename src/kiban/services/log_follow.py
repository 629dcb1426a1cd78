"""A blocking log stream read from the event loop: each follower gets a daemon thread that
reads one chunk at a time when asked, so a slow client holds back the stream rather than
filling memory, and a quiet log blocks that thread, not the API's worker threads (which
every plain endpoint shares). At most ``MAX_FOLLOWERS`` at once; past them readers poll."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future

from kiban.executors.log_streams import close_chunks

MAX_FOLLOWERS = 256
IDLE_S = 120.0
"""A reader not asked for its next chunk this long stops (its client is gone unseen)."""

_lock = threading.Lock()
_followers = 0


class _Reader(threading.Thread):
    """Reads the next chunk of ``chunks`` for each future it is handed; None ends it."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        super().__init__(name="kiban-log-follow", daemon=True)
        self.chunks = chunks
        self.asks: queue.SimpleQueue[Future[bytes | None] | None] = queue.SimpleQueue()
        self._asking = threading.Lock()
        self._stopped = False

    def ask(self) -> Future[bytes | None] | None:
        """A future for the next chunk, or None when the reader stopped (idle too long)."""
        with self._asking:
            if self._stopped:
                return None
            asked: Future[bytes | None] = Future()
            self.asks.put(asked)
            return asked

    def run(self) -> None:
        global _followers
        try:
            while True:
                try:
                    asked = self.asks.get(timeout=IDLE_S)
                except queue.Empty:
                    with self._asking:
                        if self.asks.empty():  # else an ask came in just now
                            self._stopped = True
                            return
                    continue
                if asked is None:
                    return
                if not asked.set_running_or_notify_cancel():
                    continue  # its client went away while it waited; the end is asked next
                try:
                    asked.set_result(next(self.chunks, None))
                except BaseException as exc:  # handed to the reader, whatever it is
                    asked.set_exception(exc)
        finally:
            close_chunks(self.chunks)
            with _lock:
                _followers -= 1


def follow(chunks: Iterator[bytes]) -> AsyncIterator[bytes] | None:
    """``chunks`` read on a thread of their own, or None (nothing read, ``chunks`` closed) when
    ``MAX_FOLLOWERS`` are followed already."""
    global _followers
    with _lock:
        full = _followers >= MAX_FOLLOWERS
        if not full:
            _followers += 1
    if full:
        close_chunks(chunks)
        return None
    reader = _Reader(chunks)
    reader.start()
    return _chunks_of(reader)


async def _chunks_of(reader: _Reader) -> AsyncIterator[bytes]:
    """The reader's chunks until its stream ends (its errors are raised here); leaving early
    lets the thread close the stream after the read in progress."""
    try:
        while True:
            asked = reader.ask()
            if asked is None:
                raise TimeoutError(f"the log was not read for {IDLE_S:g} s")
            chunk = await asyncio.wrap_future(asked)
            if chunk is None:
                return
            yield chunk
    finally:
        reader.asks.put(None)


def followers() -> int:
    """Streams being followed now."""
    with _lock:
        return _followers
