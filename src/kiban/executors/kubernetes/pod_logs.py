"""The logs of a Kubernetes executor's replicas: a live pod's, read from the API server, or the
one kept when its pod ended (``kept_logs``).

The API serves a pod's log only whole, so the copy read last is kept for the next chunk's read
(``kiban logs`` reads 64 KiB at a time); ``kiban logs -f`` follows one stream of the API
server's, as ``kubectl logs -f``; ``--since`` and ``--timestamps`` read the API's line times
(``timed_logs``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator

from kiban.executors.kubernetes.api import CoreApi, Obj
from kiban.executors.kubernetes.kept_logs import KeptLogs
from kiban.executors.kubernetes.naming import ATTEMPT_LABEL, JOB_LABEL, RANK_LABEL, job_key
from kiban.executors.kubernetes.nodes import TERMINAL_PHASES
from kiban.executors.kubernetes.podcache import PodCache
from kiban.executors.kubernetes.pods import CONTAINER
from kiban.executors.kubernetes.timed_logs import TimedLogs
from kiban.executors.log_streams import (
    Mark,
    line_start_from,
    marks_between,
    offset_since,
    skip_bytes,
    tail_start,
)

log = logging.getLogger("kiban.executors.kubernetes")

LOG_REFETCH_S = 1.0
"""How stale a live pod's log may be served at its end (``kiban logs -f`` polls it)."""
LOG_CACHE_PODS = 8
MAX_OFFSET = 2**62
"""A reader past any log's end: the live log's copy is fetched again unless quite fresh."""
LOG_CACHE_BYTES = 64 << 20
"""Live logs kept for the next chunk's read: the last read pods', at most this many bytes in
all, but always the one read last, however big (the API serves a log only whole: without its
copy, each 64 KiB chunk of a big log fetched all of it again)."""
FOLLOW_QUIET_S = 30.0
"""A followed live log that writes nothing this long ends its stream (the reader opens another
if the pod still runs): a reader gone away holds no connection longer."""


def ended(pod: Obj) -> bool:
    """Whether a pod's containers ended (Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def _attempt_of(pod: Obj) -> int:
    return int(pod["metadata"]["labels"].get(ATTEMPT_LABEL, 0))


class PodLogs:
    """The replicas' logs, live or kept (see the module docstring)."""

    def __init__(self, api: CoreApi, pods: PodCache, kept: KeptLogs | None) -> None:
        self.api = api
        self.pods = pods
        self.kept = kept
        self._lock = threading.Lock()
        self._logs: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # see _live_log
        self.timed = TimedLogs(api, CONTAINER, LOG_REFETCH_S)  # --since, --timestamps

    def read_log(self, job_id: str, rank: int, offset: int, limit: int) -> tuple[bytes, int]:
        """The log of the replica's newest attempt: its pod's, or the one kept when the pod
        ended (empty where the node serves no logs)."""
        data, _ = self._newest_log(job_id, rank, offset)
        chunk = data[offset : offset + limit]
        return chunk, offset + len(chunk)

    def _newest_log(self, job_id: str, rank: int, offset: int) -> tuple[bytes, Obj | None]:
        """The newest attempt's log (``offset``: where its reader is) and its pod while the
        log is the live pod's (None: the one kept, or none)."""
        pods = self.pods.select({JOB_LABEL: job_key(job_id), RANK_LABEL: str(int(rank))})
        kept = self.kept.newest_attempt(job_id, rank) if self.kept is not None else None
        newest = max(pods, key=_attempt_of) if pods else None
        if kept is not None and (newest is None or _attempt_of(newest) <= kept):
            assert self.kept is not None
            return self.kept.read(job_id, kept, rank), None
        if newest is None:
            return b"", None
        meta = newest["metadata"]
        try:
            return self._live_log(newest, offset), newest
        except Exception as exc:  # no such log yet, or the node serves none (a fake node)
            log.debug("no log for %s/%s: %s", meta["namespace"], meta["name"], exc)
            return b"", None

    def log_start(
        self, job_id: str, rank: int, *, tail_lines: int | None, since: float | None
    ) -> int | None:
        """From the live log's copy (fetched again if stale) and, for ``since``, its lines'
        times (the API's ``timestamps``); a kept log's times are not known."""
        data, live = self._newest_log(job_id, rank, MAX_OFFSET)

        def read(offset: int, limit: int) -> bytes:
            return data[offset : offset + limit]

        start = 0 if tail_lines is None else tail_start(read, len(data), tail_lines)
        if since is not None:
            if live is None:
                return None
            found = offset_since(self.timed.marks(live, len(data)), since, len(data))
            start = max(start, line_start_from(read, found))
        return start

    def log_times(self, job_id: str, rank: int, start: int, end: int) -> list[Mark] | None:
        _, live = self._newest_log(job_id, rank, start)
        return None if live is None else marks_between(self.timed.marks(live, end), start, end)

    def follow_log(self, job_id: str, rank: int, offset: int) -> Iterator[bytes] | None:
        """The newest attempt's live pod log from ``offset``, one stream of the API server's
        (as ``kubectl logs -f``): what the pod writes comes as it is written, and a log the
        kubelet rotates goes on, where polling fetched the whole log each second. None when no
        pod of the replica runs (what was kept is read)."""
        pods = self.pods.select({JOB_LABEL: job_key(job_id), RANK_LABEL: str(int(rank))})
        newest = max(pods, key=_attempt_of) if pods else None
        if newest is None or ended(newest) or newest["metadata"].get("deletionTimestamp"):
            return None
        kept = self.kept.newest_attempt(job_id, rank) if self.kept is not None else None
        if kept is not None and _attempt_of(newest) <= kept:
            return None
        meta = newest["metadata"]
        return skip_bytes(
            self.api.follow_pod_log(
                meta["namespace"],
                meta["name"],
                CONTAINER,
                tail_lines=None,
                timeout_s=FOLLOW_QUIET_S,
            ),
            offset,
        )

    def _live_log(self, pod: Obj, offset: int) -> bytes:
        """A live pod's log, from the copy read last while ``offset`` is inside it (a log only
        grows) or it is under ``LOG_REFETCH_S`` old: the API serves a log only whole, and
        ``kiban logs`` reads it in 64 KiB chunks."""
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}/{meta.get('uid', '')}"
        now = time.monotonic()
        with self._lock:
            cached = self._logs.get(key)
        if cached is not None and (offset < len(cached[1]) or now - cached[0] < LOG_REFETCH_S):
            return cached[1]
        data = self.api.read_pod_log(meta["namespace"], meta["name"], CONTAINER)
        with self._lock:
            self._logs[key] = (now, data)
            self._logs.move_to_end(key)
            held = sum(len(copy) for _, copy in self._logs.values())
            while len(self._logs) > 1 and (
                len(self._logs) > LOG_CACHE_PODS or held > LOG_CACHE_BYTES
            ):
                held -= len(self._logs.popitem(last=False)[1][1])
        return data
