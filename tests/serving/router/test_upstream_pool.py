"""The router's pool of idle replica connections: reuse order and idle expiry, on a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from kiban.serving.router.upstream import UpstreamConnection, UpstreamPool


class _Transport:
    """Records whether the pool closed the connection."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _connection(pool: UpstreamPool, address: str = "unix:/r.sock") -> UpstreamConnection:
    conn = UpstreamConnection(pool, address)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    return conn


def _transport(conn: UpstreamConnection) -> _Transport:
    assert isinstance(conn.transport, _Transport)
    return conn.transport


def test_the_most_recently_returned_connection_is_reused_first(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = _Clock()
    pool = UpstreamPool(loop, clock=clock, idle_expiry_s=1.5)
    first, second = _connection(pool), _connection(pool)
    pool.give_back(first)
    clock.now += 0.1
    pool.give_back(second)

    assert pool.take("unix:/r.sock") is second
    assert pool.take("unix:/r.sock") is first
    assert pool.take("unix:/r.sock") is None


@pytest.mark.parametrize(("idle_s", "reused"), [(1.6, False), (1.4, True)])
def test_a_connection_idle_past_the_expiry_is_closed_not_reused(
    loop: asyncio.AbstractEventLoop, idle_s: float, reused: bool
) -> None:
    clock = _Clock()
    pool = UpstreamPool(loop, clock=clock, idle_expiry_s=1.5)
    conn = _connection(pool)
    pool.give_back(conn)
    clock.now += idle_s

    assert pool.take("unix:/r.sock") is (conn if reused else None)
    assert _transport(conn).closed is not reused


def test_finding_a_stale_connection_closes_the_older_ones_under_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = _Clock()
    pool = UpstreamPool(loop, clock=clock, idle_expiry_s=1.5)
    oldest, old, fresh = _connection(pool), _connection(pool), _connection(pool)
    pool.give_back(oldest)
    clock.now += 0.5
    pool.give_back(old)
    clock.now += 1.2
    pool.give_back(fresh)  # oldest is now 1.7 s idle, old 1.2 s

    assert pool.take("unix:/r.sock") is fresh
    assert pool.take("unix:/r.sock") is old
    assert pool.take("unix:/r.sock") is None
    assert _transport(oldest).closed
    assert not _transport(old).closed


def test_reuse_restarts_the_idle_time(loop: asyncio.AbstractEventLoop) -> None:
    clock = _Clock()
    pool = UpstreamPool(loop, clock=clock, idle_expiry_s=1.5)
    conn = _connection(pool)
    for _ in range(5):  # 5 s in all, never 1.5 s idle at once
        pool.give_back(conn)
        clock.now += 1.0
        assert pool.take("unix:/r.sock") is conn


def test_pools_per_replica_expire_separately(loop: asyncio.AbstractEventLoop) -> None:
    clock = _Clock()
    pool = UpstreamPool(loop, clock=clock, idle_expiry_s=1.5)
    stale = _connection(pool, "unix:/a.sock")
    pool.give_back(stale)
    clock.now += 1.0
    fresh = _connection(pool, "unix:/b.sock")
    pool.give_back(fresh)
    clock.now += 1.0

    assert pool.take("unix:/a.sock") is None
    assert pool.take("unix:/b.sock") is fresh
