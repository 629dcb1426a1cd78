"""``kiban.testing.eventually``: polls until the condition holds, or fails naming it."""

from __future__ import annotations

import asyncio

import pytest

from kiban.testing import TimedOut, eventually, eventually_async


def test_returns_the_first_truthy_answer() -> None:
    answers = iter([None, 0, "", "ready", "later"])
    assert eventually(lambda: next(answers), what="readiness", interval=0) == "ready"
    assert next(answers) == "later"  # not called again once it held


def test_a_condition_that_never_holds_fails_naming_what_was_awaited_and_the_last_answer() -> None:
    calls: list[int] = []

    def probe() -> list[int]:
        calls.append(1)
        return []

    with pytest.raises(TimedOut, match=r"waiting for job j-1 to start \(last: \[\]\)"):
        eventually(probe, what="job j-1 to start", timeout=0)
    assert calls == [1]  # looked once even with no time at all


def test_a_timeout_failure_is_a_test_failure() -> None:
    assert issubclass(TimedOut, AssertionError)


def test_a_negative_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="timeout"):
        eventually(lambda: True, what="x", timeout=-1)


def test_the_async_form_lets_the_awaited_task_run() -> None:
    async def scenario() -> str:
        done: list[str] = []

        async def work() -> None:
            await asyncio.sleep(0)
            done.append("worked")

        task = asyncio.ensure_future(work())
        found = await eventually_async(lambda: done and done[0], what="the task's work")
        await task
        return found

    assert asyncio.run(scenario()) == "worked"


def test_the_async_form_fails_naming_what_was_awaited() -> None:
    with pytest.raises(TimedOut, match="waiting for nothing to happen"):
        asyncio.run(eventually_async(lambda: None, what="nothing to happen", timeout=0))
