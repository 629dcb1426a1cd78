"""Which new submissions the next pass would not look at: those behind a full window.

A pass reads the first ``window`` pending jobs of each queue (priority, then submit time). When
a queue has more waiting than that, a job submitted behind the last one read is outside the
window: a pass run for it would read the same jobs, make the same decisions and write nothing,
so its submission need not ask for one. It is judged once the jobs ahead of it leave (their
admission or cancellation asks for a pass of its own), and until then readers show it waiting
in the queue's backlog (``awaiting_pass``). Anything else (a job ahead of the window's end, a
queue whose window is not full, a pass under way) asks for a pass as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from kiban.scheduler.snapshot import PendingJob

Order = tuple[int, float]
"""Where a job stands in its queue's window: its priority negated, then its submit time."""


def order_of(priority: int, submitted_at: float) -> Order:
    return (-priority, submitted_at)


class WindowEnds:
    """Per queue whose window was full at the last pass: the order of its last job read.

    While a pass runs (``begin`` to ``update``) a submission is judged by the previous pass's
    ends, and noted: ``update`` tells whether one of those noted stands ahead of the new ends
    (the snapshot may have been read before it was stored), so that another pass follows.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ends: dict[str, Order] = {}
        self._arrived: list[tuple[str, Order]] | None = None

    def begin(self) -> None:
        """A pass is about to read the store."""
        with self._lock:
            self._arrived = []

    def forget(self) -> None:
        """A pass failed: no end is known (every submission asks for a pass) until the next."""
        with self._lock:
            self._ends, self._arrived = {}, None

    def update(self, pending: Iterable[PendingJob], window: int) -> bool:
        """Take the ends from a pass's pending jobs (each queue's first ``window``, in the
        store's order); True when a submission stored since ``begin`` is not behind them."""
        counts: dict[str, int] = {}
        last: dict[str, Order] = {}
        for job in pending:
            counts[job.queue] = counts.get(job.queue, 0) + 1
            order = order_of(job.priority, job.submitted_at)
            if job.queue not in last or order > last[job.queue]:
                last[job.queue] = order
        ends = {queue: last[queue] for queue, count in counts.items() if count >= window}
        with self._lock:
            self._ends = ends
            arrived, self._arrived = self._arrived or [], None
        return not all(_behind(ends, queue, order) for queue, order in arrived)

    def behind(self, queue: str, priority: int, submitted_at: float) -> bool:
        """Whether a job of ``queue`` stands after the end of its queue's full window (a tie
        is not behind: the store orders ties by id, which this does not compare)."""
        order = order_of(priority, submitted_at)
        with self._lock:
            if self._arrived is not None:
                self._arrived.append((queue, order))
            return _behind(self._ends, queue, order)


def _behind(ends: dict[str, Order], queue: str, order: Order) -> bool:
    end = ends.get(queue)
    return end is not None and order > end
