"""A bounded number of holders, and a bounded line of waiters served in order, for a while."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class Slots:
    """``capacity`` holders at once; up to ``max_waiting`` more wait in line, first come first
    served, at most ``wait_s`` each. Event-loop only (no locks)."""

    def __init__(self, capacity: int, max_waiting: int = 0, wait_s: float = 0.0) -> None:
        self.capacity = capacity
        self.max_waiting = max_waiting
        self.wait_s = wait_s
        self.held = 0
        self._line: deque[asyncio.Future[None]] = deque()

    @property
    def idle(self) -> bool:
        return self.held == 0 and not self._line

    @property
    def waiting(self) -> int:
        return len(self._line)

    async def take(self) -> bool:
        """Whether a slot was had (at once, or in line within ``wait_s``); give it back after."""
        if self.held < self.capacity and not self._line:
            self.held += 1
            return True
        if len(self._line) >= self.max_waiting or self.wait_s <= 0:
            return False
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._line.append(turn)
        try:
            await asyncio.wait_for(asyncio.shield(turn), self.wait_s)
        except TimeoutError:
            if turn.done():  # handed a slot as the wait ran out
                return True
            turn.cancel()
            self._leave(turn)
            return False
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.give_back()  # handed one, but its request is gone
            else:
                turn.cancel()
                self._leave(turn)
            raise
        return True

    def give_back(self) -> None:
        """End a holding: the first in line takes the slot over, or it is free."""
        while self._line:
            turn = self._line.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.held -= 1

    def _leave(self, turn: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._line.remove(turn)
