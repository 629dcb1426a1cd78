"""Checkpoints as files in a directory that kiban can read: when the newest was written."""

from __future__ import annotations

import os
from pathlib import Path


def newest_file_mtime(directory: str | Path) -> float | None:
    """The newest modification time of the regular files directly in ``directory`` (None:
    none, or no such directory). Links are not followed: a job's files may point anywhere."""
    newest: float | None = None
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                    newest = mtime if newest is None else max(newest, mtime)
    except OSError:
        return None
    return newest
