"""An asyncio micro-batcher: requests that arrive close together run in one forward pass.

Requests wait at most ``max_wait_s`` for company (or less, once
``max_batch_size`` compatible ones are waiting), then run together on the
model's single worker thread. While that thread is busy, new requests keep
gathering, so under load each pass takes everything compatible that arrived
meanwhile. Only requests with equal keys share a pass; key None runs alone.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass
class _Waiting(Generic[Item, Result]):
    item: Item
    key: Hashable | None
    future: asyncio.Future[Result] = field(repr=False)


class MicroBatcher(Generic[Item, Result]):
    """Groups submitted items into batches for ``run``, which returns one result per item."""

    def __init__(
        self,
        run: Callable[[Sequence[Item]], Sequence[Result]],
        *,
        executor: Executor,
        max_batch_size: int,
        max_wait_s: float,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._run = run
        self._executor = executor
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self._on_batch = on_batch
        self._waiting: collections.deque[_Waiting[Item, Result]] = collections.deque()
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.batch_sizes: collections.Counter[int] = collections.Counter()
        """How many batches of each size have run (what tests and metrics read)."""

    async def submit(self, item: Item, key: Hashable | None = "") -> Result:
        """Queue ``item`` and wait for its result (or the exception its batch raised)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or the app now runs on another event loop
            self._loop, self._task = loop, None
            self._arrived = asyncio.Event()
            self._waiting.clear()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._serve())
        future: asyncio.Future[Result] = loop.create_future()
        self._waiting.append(_Waiting(item, key, future))
        self._arrived.set()
        return await future

    async def close(self) -> None:
        """Stop the batching task; waiting requests are cancelled."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for waiting in self._waiting:
            waiting.future.cancel()
        self._waiting.clear()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._waiting:
                self._arrived.clear()
                await self._arrived.wait()
            batch = await self._gather(loop)
            batch = [w for w in batch if not w.future.done()]  # the client gave up
            if not batch:
                continue
            self.batch_sizes[len(batch)] += 1
            if self._on_batch is not None:
                self._on_batch(len(batch))
            try:
                results = await loop.run_in_executor(
                    self._executor, self._run, [w.item for w in batch]
                )
            except Exception as exc:
                for waiting in batch:
                    if not waiting.future.done():
                        waiting.future.set_exception(exc)
                continue
            for waiting, result in zip(batch, results, strict=True):
                if not waiting.future.done():
                    waiting.future.set_result(result)

    async def _gather(self, loop: asyncio.AbstractEventLoop) -> list[_Waiting[Item, Result]]:
        """Wait for the head's companions, then take the head and up to size-1 compatible ones."""
        head = self._waiting[0]
        deadline = loop.time() + self.max_wait_s
        while head.key is not None and self._compatible(head) < self.max_batch_size:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                break
        batch = [self._waiting.popleft()]
        if head.key is None:
            return batch
        kept: collections.deque[_Waiting[Item, Result]] = collections.deque()
        while self._waiting:
            waiting = self._waiting.popleft()
            if waiting.key == head.key and len(batch) < self.max_batch_size:
                batch.append(waiting)
            else:
                kept.append(waiting)
        self._waiting = kept
        return batch

    def _compatible(self, head: _Waiting[Item, Result]) -> int:
        return sum(1 for w in self._waiting if w.key == head.key)
