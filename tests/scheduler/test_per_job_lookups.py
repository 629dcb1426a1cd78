"""What a cycle asks of every waiting job is a look-up: a job's gang shape is found once (one
object per shape), and what the queues' quotas fix (terms, pool, ceilings, the refusals written,
each queue's flavors) is kept across cycles for quotas of equal value, never for changed ones."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kiban.scheduler import cycle as cycle_module
from kiban.scheduler import quota as quota_module
from kiban.scheduler import schedule
from kiban.scheduler.feasibility import usable_flavors
from kiban.scheduler.quota import QuotaBook
from kiban.scheduler.snapshot import QueueView
from kiban.testing import cluster, job, queue, snapshot


@pytest.fixture(autouse=True)
def no_plans_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start with no quota plan kept (earlier tests' cycles made theirs)."""
    monkeypatch.setattr(quota_module, "_PLANS", {}, raising=False)


def test_jobs_of_one_gang_shape_share_one_shape() -> None:
    a = job("a").replicas(2, gpu=4).build()
    b = job("b").replicas(2, gpu=4).priority(5).build()
    other = job("c").replicas(2, gpu=2).build()
    assert a.shape is b.shape
    assert a.shape is not other.shape
    assert replace(a, priority=9).shape is a.shape  # a job made anew keeps its shape
    assert a == replace(a)  # the shape is no part of a job's equality


def _queues(nominal: int, used: int) -> list[QueueView]:
    """Two queues of one cohort; ``a`` uses ``used`` of its ``nominal`` GPUs, ``b`` lends 8."""
    return [
        QueueView("a", "t1", {"h100": nominal}, {"h100": used}, cohort="c"),
        QueueView("b", "t2", {"h100": 8}, {}, cohort="c", lending_limit={"h100": 2}),
    ]


def test_a_refusal_is_written_once_for_books_of_equal_quotas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written: list[str] = []
    refusal = QuotaBook._refusal

    def counted(self: QuotaBook, queue: str, *args: int) -> object:
        written.append(queue)
        return refusal(self, queue, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(QuotaBook, "_refusal", counted)
    first = QuotaBook(_queues(8, 8)).check("a", "h100", 4)
    again = QuotaBook(_queues(8, 8)).check("a", "h100", 4)  # a later cycle: new, equal views
    assert not first.fits
    assert again is first
    assert written == ["a"]


def test_a_changed_quota_or_use_is_refused_by_its_own_numbers() -> None:
    kept = QuotaBook(_queues(8, 8)).check("a", "h100", 4)
    assert kept.reason is not None and "has 0 free of 8" in kept.reason.message
    assert "can lend 2" in kept.reason.message
    smaller = QuotaBook(_queues(6, 6)).check("a", "h100", 4)
    assert smaller.reason is not None and "has 0 free of 6" in smaller.reason.message
    used = QuotaBook(_queues(8, 7)).check("a", "h100", 4)
    assert used.reason is not None and "has 1 free of 8" in used.reason.message
    book = QuotaBook(_queues(8, 8))
    book.take("b", "h100", 7)  # b now draws on its own lent part: the pool has 1 left
    drawn = book.check("a", "h100", 4)
    assert drawn.reason is not None and "can lend 1" in drawn.reason.message


def test_a_queues_flavors_are_found_once_across_cycles(monkeypatch: pytest.MonkeyPatch) -> None:
    found: list[str] = []

    def counted(q: QueueView, flavors: object) -> tuple[str, ...]:
        found.append(q.name)
        return usable_flavors(q, flavors)  # type: ignore[arg-type]

    monkeypatch.setattr(cycle_module, "usable_flavors", counted)
    nodes = cluster().nodes(1, gpus=8, prefix="n").build()

    def cycle(jobs: int, nominal: int) -> list[str]:
        q = queue("q").best_effort().nominal("default", nominal).build()
        waiting = [job(f"j{i}").queue("q").replicas(1, gpu=8).build() for i in range(jobs)]
        decisions = schedule(snapshot(nodes=nodes, queues=[q], pending=waiting))
        return [a.job_id for a in decisions.admitted]

    assert cycle(3, 8) == ["j0"]
    assert cycle(3, 8) == ["j0"]  # the same quota in a later cycle: kept
    assert found == ["q"]
    assert cycle(3, 4) == []  # a changed quota is worked out anew
    assert found == ["q", "q"]
