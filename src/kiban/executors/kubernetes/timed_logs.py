"""When each line of a live pod's log was written, for ``kiban logs --since`` and ``--timestamps``.

The pod log API puts each line's time before it on request (``timestamps=true``, RFC 3339 with
nanoseconds); the log without them is what ``read_log`` serves, so the times become marks at
the offsets of that log (``split_timed``). A pod's marks are fetched again only when a reader
needs them past what was fetched and ``refetch_s`` have passed (the API serves a log only whole).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from kiban.executors.kubernetes.api import CoreApi, Obj
from kiban.executors.log_streams import Mark, split_timed

CACHED_PODS = 8


class TimedLogs:
    """The marks of live pods' logs, fetched from the API and kept for a few pods."""

    def __init__(self, api: CoreApi, container: str, refetch_s: float = 1.0) -> None:
        self.api = api
        self.container = container
        self.refetch_s = refetch_s
        self._lock = threading.Lock()
        self._marks: OrderedDict[str, tuple[float, int, list[Mark]]] = OrderedDict()

    def marks(self, pod: Obj, end: int) -> list[Mark]:
        """The marks of ``pod``'s log, fetched again when the copy ends before ``end`` and is
        ``refetch_s`` old."""
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}/{meta.get('uid', '')}"
        now = time.monotonic()
        with self._lock:
            cached = self._marks.get(key)
        if cached is not None and (end <= cached[1] or now - cached[0] < self.refetch_s):
            return cached[2]
        timed = self.api.read_pod_log(
            meta["namespace"], meta["name"], self.container, timestamps=True
        )
        plain, marks = split_timed(timed)
        with self._lock:
            self._marks[key] = (now, len(plain), marks)
            self._marks.move_to_end(key)
            while len(self._marks) > CACHED_PODS:
                self._marks.popitem(last=False)
        return marks
