"""A short-lived cache of what every submission looks up: its caller and its queue.

Submissions are the API's hot path; reading the same token and queue rows for each of
hundreds per second costs more than the submission itself. Entries live ``ttl_s`` seconds;
only lookups that found something are kept, so a new token or queue is seen at once, and a
change to an existing one within ``ttl_s``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")


class LookupCache:
    """Values by key for ``ttl_s`` seconds; thread-safe; bounded to ``max_entries``."""

    def __init__(self, ttl_s: float = 2.0, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[Hashable, tuple[float, object]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        """The cached value of ``key``, or ``load()`` (kept unless it raised or gave None)."""
        now = time.monotonic()
        with self._lock:
            found = self._entries.get(key)
        if found is not None and found[0] > now:
            return found[1]  # type: ignore[return-value]
        value = load()
        if value is None:
            return value
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[key] = (now + self.ttl_s, value)
        return value

    def peek(self, key: Hashable) -> object | None:
        """The value of ``key`` while it is fresh, or None (nothing is loaded)."""
        with self._lock:
            found = self._entries.get(key)
        if found is not None and found[0] > time.monotonic():
            return found[1]
        return None

    def put(self, key: Hashable, value: object) -> None:
        """Keep ``value`` for ``key`` for ``ttl_s`` seconds."""
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[key] = (time.monotonic() + self.ttl_s, value)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
