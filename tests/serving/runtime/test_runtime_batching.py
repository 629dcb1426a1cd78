"""The micro-batcher: concurrent requests share a pass, keys keep incompatible ones apart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from kiban.serving.runtime.batching import MicroBatcher


def _batcher(
    calls: list[list[int]], *, size: int = 4, wait_s: float = 0.05, fail_on: int | None = None
) -> MicroBatcher[int, int]:
    def run(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        if fail_on is not None and fail_on in items:
            raise ValueError(f"bad item {fail_on}")
        return [item * 10 for item in items]

    return MicroBatcher(run, executor=ThreadPoolExecutor(1), max_batch_size=size, max_wait_s=wait_s)


def test_concurrent_requests_run_together_and_get_their_own_results() -> None:
    calls: list[list[int]] = []
    batcher = _batcher(calls, size=8)

    async def scenario() -> list[int]:
        results = await asyncio.gather(*(batcher.submit(i) for i in range(5)))
        await batcher.close()
        return list(results)

    assert asyncio.run(scenario()) == [0, 10, 20, 30, 40]
    assert calls == [[0, 1, 2, 3, 4]]
    assert batcher.batch_sizes == {5: 1}


def test_batches_are_capped_at_the_max_size() -> None:
    calls: list[list[int]] = []
    batcher = _batcher(calls, size=3)

    async def scenario() -> None:
        await asyncio.gather(*(batcher.submit(i) for i in range(7)))
        await batcher.close()

    asyncio.run(scenario())
    assert [len(c) for c in calls] == [3, 3, 1]
    assert sorted(i for c in calls for i in c) == list(range(7))


def test_only_equal_keys_share_a_batch_and_none_runs_alone() -> None:
    calls: list[list[int]] = []
    batcher = _batcher(calls, size=8)

    async def scenario() -> None:
        await asyncio.gather(
            batcher.submit(1, "a"),
            batcher.submit(2, "b"),
            batcher.submit(3, "a"),
            batcher.submit(4, None),
            batcher.submit(5, None),
        )
        await batcher.close()

    asyncio.run(scenario())
    assert sorted(sorted(c) for c in calls) == [[1, 3], [2], [4], [5]]


def test_a_lone_request_waits_no_longer_than_the_window() -> None:
    calls: list[list[int]] = []
    batcher = _batcher(calls, wait_s=0.2)

    async def scenario() -> tuple[int, float]:
        started = time.perf_counter()
        result = await asyncio.wait_for(batcher.submit(7), 5)  # never for a full batch
        waited = time.perf_counter() - started
        await batcher.close()
        return result, waited

    result, waited = asyncio.run(scenario())
    assert result == 70 and calls == [[7]]
    assert waited < 1.0  # the 0.2 s window at most, with room for a slow machine


def test_a_failing_batch_fails_each_of_its_requests_and_the_batcher_goes_on() -> None:
    calls: list[list[int]] = []
    batcher = _batcher(calls, size=2, fail_on=13)

    async def scenario() -> int:
        results = await asyncio.gather(
            batcher.submit(1), batcher.submit(13), return_exceptions=True
        )
        assert all(isinstance(r, ValueError) for r in results)
        after = await batcher.submit(2)
        await batcher.close()
        return after

    assert asyncio.run(scenario()) == 20


def test_requests_arriving_while_a_pass_runs_form_the_next_batch() -> None:
    calls: list[list[int]] = []
    batcher = _batcher(calls, size=8, wait_s=0.0)

    async def scenario() -> None:
        first = asyncio.ensure_future(batcher.submit(0))
        await asyncio.sleep(0)  # the first pass starts alone (no wait window)
        rest = [asyncio.ensure_future(batcher.submit(i)) for i in range(1, 4)]
        await asyncio.gather(first, *rest)
        await batcher.close()

    asyncio.run(scenario())
    assert calls[0] == [0]
    assert sum(len(c) for c in calls) == 4
    assert len(calls) <= 3


@pytest.mark.parametrize("size", [1, 2])
def test_size_one_never_batches(size: int) -> None:
    calls: list[list[int]] = []
    batcher = _batcher(calls, size=size)

    async def scenario() -> None:
        await asyncio.gather(*(batcher.submit(i) for i in range(4)))
        await batcher.close()

    asyncio.run(scenario())
    assert max(len(c) for c in calls) == size
