"""New connections' requests begun a few at a time per turn of the event loop.

A burst of a thousand connections arrives in a handful of the loop's turns; parsing each
request and running its admission in those turns made single turns of 50-110 ms of CPU on
the event loop, and a ``/healthz`` probe, which is answered as soon as its bytes are read,
waited for the whole turn (and for as long again as the host's other work kept the loop's
thread off a core meanwhile). With at most ``per_turn`` new requests begun per turn, a turn
stays short and the probe waits for one short turn; the requests are begun in the order
they arrived, and the total work is the same.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

Begin = Callable[[], bool]
"""Begins one held request: whether it was begun (False: its connection went away)."""


class TurnPacer:
    """At most ``per_turn`` beginnings per turn of ``loop``; the rest wait in line, first come
    first begun, and ``per_turn`` of them are begun at the start of each later turn.
    Event-loop only (no locks)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, per_turn: int) -> None:
        if per_turn < 1:
            raise ValueError("per_turn must be at least 1")
        self.loop = loop
        self.per_turn = per_turn
        self.used = 0  # beginnings in the current turn
        self._line: deque[Begin] = deque()
        self._turn_scheduled = False

    @property
    def waiting(self) -> int:
        return len(self._line)

    def admit(self, begin: Begin) -> bool:
        """Whether the caller may begin its request now; if not, ``begin`` is called in a
        later turn (unless the line is dropped with the loop)."""
        self._next_turn()
        if self.used < self.per_turn and not self._line:
            self.used += 1
            return True
        self._line.append(begin)
        return False

    def _next_turn(self) -> None:
        """A callback at the start of the next turn ends this one (``call_soon``'s callbacks
        run in the loop's next turn, not in the current one)."""
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.loop.call_soon(self._turn)

    def _turn(self) -> None:
        self._turn_scheduled = False
        self.used = 0
        while self._line and self.used < self.per_turn:
            if self._line.popleft()():
                self.used += 1
        if self._line:
            self._next_turn()
