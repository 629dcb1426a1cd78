"""A followed log from a byte offset: the sources stream a log from its start, and a reader
that has the first ``offset`` bytes already wants what comes after."""

from __future__ import annotations

from collections.abc import Iterator


def skip_bytes(chunks: Iterator[bytes], offset: int) -> Iterator[bytes]:
    """``chunks`` without their first ``offset`` bytes (the source is closed with this)."""
    try:
        for chunk in chunks:
            if offset >= len(chunk):
                offset -= len(chunk)
                continue
            yield chunk[offset:] if offset else chunk
            offset = 0
    finally:
        close_chunks(chunks)


def close_chunks(chunks: Iterator[bytes]) -> None:
    """Close a source of chunks that can be closed (a generator, a streamed response)."""
    close = getattr(chunks, "close", None)
    if close is not None:
        close()
