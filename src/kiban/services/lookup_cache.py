"""A short-lived cache of what every submission looks up: its caller and its queue.

Submissions are the API's hot path; reading the same token and queue rows for each of
hundreds per second costs more than the submission itself. Entries live ``ttl_s`` seconds;
only lookups that found something are kept, so a new token or queue is seen at once, and a
change to an existing one within ``ttl_s``; ``clear`` (a token revoked, a queue changed) is
seen at once, a lookup under way when it came included: its value is not kept (it may have
been read before the change). Time comes from an injected clock (the monotonic
one by default), so that tests expire entries by moving a ``ManualClock``, not by sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import TypeVar

from kiban.clock import Clock

T = TypeVar("T")


class _MonotonicClock:
    """Seconds that never go back (expiry must not follow changes to the wall clock)."""

    def now(self) -> float:
        return time.monotonic()


class LookupCache:
    """Values by key for ``ttl_s`` seconds; thread-safe; bounded to ``max_entries``."""

    def __init__(
        self, ttl_s: float = 2.0, max_entries: int = 10_000, clock: Clock | None = None
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock or _MonotonicClock()
        self._entries: dict[Hashable, tuple[float, object]] = {}
        self._lock = threading.Lock()
        self._generation = 0  # one more at each clear

    @property
    def generation(self) -> int:
        """What ``put`` is given as ``since``: a value read before a later ``clear`` is stale."""
        with self._lock:
            return self._generation

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        """The cached value of ``key``, or ``load()`` (kept unless it raised or gave None)."""
        now = self._clock.now()
        with self._lock:
            found = self._entries.get(key)
            since = self._generation
        if found is not None and found[0] > now:
            return found[1]  # type: ignore[return-value]
        value = load()
        if value is not None:
            self._keep(key, now + self.ttl_s, value, since)
        return value

    def peek(self, key: Hashable) -> object | None:
        """The value of ``key`` while it is fresh, or None (nothing is loaded)."""
        with self._lock:
            found = self._entries.get(key)
        if found is not None and found[0] > self._clock.now():
            return found[1]
        return None

    def put(self, key: Hashable, value: object, since: int | None = None) -> None:
        """Keep ``value`` for ``key`` for ``ttl_s`` seconds, unless the cache was cleared after
        ``generation`` was ``since`` (the value was read before the change that cleared it)."""
        self._keep(key, self._clock.now() + self.ttl_s, value, since)

    def _keep(self, key: Hashable, until: float, value: object, since: int | None) -> None:
        with self._lock:
            if since is not None and since != self._generation:
                return
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[key] = (until, value)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._generation += 1
