"""The output of pods that ended, kept as files once kiban deletes the pods.

A pod's log lives on its node only as long as the pod: without this, ``kiban logs`` of a job
that finished or failed on Kubernetes would show nothing, which is when it is wanted most.
One file per replica and attempt, ``<root>/<job id>/<attempt>/<rank>.log``, written whole
(a temporary file renamed), at most ``limit`` bytes: the end of a longer log, which is where a
failure shows, behind one line that says how much was left out.
"""

from __future__ import annotations

import os
from pathlib import Path

from kiban.domain.jobspec import DNS_LABEL

KEPT_LOG_BYTES = 8 << 20
"""The most of one replica's log that is kept (its end)."""
KEPT_LOG_LINES = 200_000
"""The lines asked of the API server for a log to keep, so that a huge log is not read whole."""


class KeptLogs:
    """The kept logs under ``root``."""

    def __init__(self, root: Path, limit: int = KEPT_LOG_BYTES) -> None:
        self.root = root
        self.limit = limit

    def path(self, job_id: str, attempt: int, rank: int) -> Path:
        if not DNS_LABEL.match(job_id):  # kiban's job ids are; anything else is no path of ours
            raise ValueError(f"job id {job_id!r} is not a DNS label")
        return self.root / job_id / str(int(attempt)) / f"{int(rank)}.log"

    def has(self, job_id: str, attempt: int, rank: int) -> bool:
        return self.path(job_id, attempt, rank).exists()

    def keep(self, job_id: str, attempt: int, rank: int, data: bytes, dropped: int = 0) -> None:
        """Write one replica's log (its end, when longer than the limit); ``dropped``: bytes
        already left out before ``data`` (see ``LogTail``)."""
        path = self.path(job_id, attempt, rank)
        excess = max(len(data) - self.limit, 0)
        if excess or dropped:
            data = b"[kiban: the first %d bytes of this log were not kept]\n%b" % (
                dropped + excess,
                data[excess:],
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_bytes(data)
        partial.replace(path)

    def newest_attempt(self, job_id: str, rank: int) -> int | None:
        """The newest attempt whose log of ``rank`` is kept."""
        job_dir = self.root / job_id
        if not DNS_LABEL.match(job_id) or not job_dir.is_dir():
            return None
        attempts = [
            int(entry.name)
            for entry in job_dir.iterdir()
            if entry.name.isdigit() and (entry / f"{int(rank)}.log").exists()
        ]
        return max(attempts, default=None)

    def read(self, job_id: str, attempt: int, rank: int) -> bytes:
        try:
            return self.path(job_id, attempt, rank).read_bytes()
        except FileNotFoundError:
            return b""


class LogTail:
    """The end of a log read in chunks (a followed stream): about ``limit`` bytes, and how many
    were left out before them, so that a long log is never held whole."""

    def __init__(self, limit: int = KEPT_LOG_BYTES) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        excess = len(self.data) - self.limit
        if excess > self.limit:  # cut in large steps: a cut moves what is kept
            del self.data[:excess]
            self.dropped += excess
