"""The lookup cache forgets at ``clear``, a lookup under way when it came included: a value read
before the change that cleared the cache (a token revoked) is not kept."""

from __future__ import annotations

from kiban.services.lookup_cache import LookupCache
from kiban.testing import ManualClock


def test_a_value_loaded_across_a_clear_is_returned_but_not_kept() -> None:
    cache = LookupCache(ttl_s=2.0, clock=ManualClock())

    def load() -> str:
        cache.clear()  # the token is revoked while its row is being read
        return "alice"

    assert cache.get("k", load) == "alice"
    assert cache.peek("k") is None
    assert cache.get("k", lambda: "read again") == "read again"
    assert cache.peek("k") == "read again"


def test_put_since_an_earlier_generation_is_dropped() -> None:
    cache = LookupCache(ttl_s=2.0, clock=ManualClock())
    since = cache.generation
    cache.put("kept", 1, since)
    cache.clear()
    cache.put("stale", 2, since)
    cache.put("fresh", 3, cache.generation)
    assert (cache.peek("kept"), cache.peek("stale"), cache.peek("fresh")) == (None, None, 3)
