"""Group commit: one thread writes queued items in batches, as soon as it has any.

A write's cost is dominated by its commit (and, on SQLite, by waiting for the write lock). The
thread takes the first item as soon as it is queued, with everything queued meanwhile (up to
``max_batch``), and hands the batch to ``commit``: there is no linger, so an item alone is
written at once, and the items queued while one commit runs share the next. The items carry
their own futures; ``commit`` completes them. Used by the submission writer and the audit log.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger("kiban.group_commit")


@dataclass
class _Flush:
    """A marker: set once everything queued before it is committed (or failed)."""

    done: threading.Event = field(default_factory=threading.Event)


class GroupCommit(Generic[T]):
    """Calls ``commit`` from one thread (named ``name``, started at the first item) with
    batches of up to ``max_batch`` queued items, in the order they were queued. ``commit``
    completes every item's future, failures included (what it lets escape is only logged)."""

    def __init__(self, commit: Callable[[list[T]], None], max_batch: int, name: str) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, not {max_batch}")
        self._commit = commit
        self._max_batch = max_batch
        self._name = name
        self._queue: queue.SimpleQueue[T | _Flush | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, item: T) -> None:
        """Queue ``item`` for the next batch."""
        self._put(item)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until what was queued before this call is committed (False: not in time)."""
        with self._lock:
            if self._thread is None:
                return True
        marker = _Flush()
        self._put(marker)
        return marker.done.wait(timeout_s)

    def stop(self) -> None:
        """Commit what is queued, then stop the thread (a later ``put`` starts another)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=30)

    def _put(self, item: T | _Flush) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._queue.put(item)

    def _run(self) -> None:
        while True:
            item = self._queue.get()  # waits for the first
            batch: list[T] = []
            flushes: list[_Flush] = []
            stopping = False
            while True:  # then takes what is queued already, waiting for nothing more
                if item is None:
                    stopping = True
                elif isinstance(item, _Flush):
                    flushes.append(item)
                else:
                    batch.append(item)
                if stopping or len(batch) >= self._max_batch:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                try:
                    self._commit(batch)
                except Exception:  # the thread must go on for the items queued after these
                    log.exception("%s: a batch of %d failed", self._name, len(batch))
            for marker in flushes:
                marker.done.set()
            # not kept while waiting for the next: a batch's items (a request's objects) go now
            del item, batch
            if stopping:
                return
