"""The quota book's what-ifs: changes in a transaction are undone on exit unless committed, a
committed inner one is still undone with its outer one, and an undone inner one leaves nothing
for its outer one to undo (a victim search gives victims' quota back and takes it again)."""

from __future__ import annotations

from kiban.scheduler.quota import QuotaBook
from kiban.scheduler.snapshot import QueueView


def book() -> QuotaBook:
    return QuotaBook(
        [
            QueueView(
                "a",
                "t1",
                {"h100": 8},
                {"h100": 6},
                cohort="c",
                extended_nominal={"h100": {"rdma/hca": 8}},
                extended_used={"h100": {"rdma/hca": 6}},
            ),
            QueueView("b", "t2", {"h100": 8}, {"h100": 10}, cohort="c"),
        ]
    )


def state(quota: QuotaBook) -> tuple[int, int, int, int]:
    return (
        quota.used("a", "h100"),
        quota.used("b", "h100"),
        quota.borrowed("b", "h100"),
        quota.extended_used("a", "h100", "rdma/hca"),
    )


def test_changes_in_a_transaction_are_undone_on_exit() -> None:
    quota = book()
    before = state(quota)
    with quota.transaction():
        quota.give("b", "h100", 4)
        quota.take("a", "h100", 2)
        quota.give_extended("a", "h100", (("rdma/hca", 6),))
        assert state(quota) == (8, 6, 0, 0)
    assert state(quota) == before == (6, 10, 2, 6)


def test_a_committed_transaction_keeps_its_changes() -> None:
    quota = book()
    with quota.transaction() as tx:
        quota.give("b", "h100", 2)
        tx.commit()
    assert state(quota) == (6, 8, 0, 6)


def test_a_committed_inner_transaction_is_undone_with_its_outer_one() -> None:
    quota = book()
    before = state(quota)
    with quota.transaction():
        quota.give("b", "h100", 4)
        with quota.transaction() as inner:
            quota.take("b", "h100", 1)
            inner.commit()
        assert quota.used("b", "h100") == 7
    assert state(quota) == before


def test_an_undone_inner_transaction_leaves_its_outer_one_nothing_of_it_to_undo() -> None:
    quota = book()
    before = state(quota)
    with quota.transaction():
        quota.give("b", "h100", 4)
        with quota.transaction():
            quota.take("b", "h100", 3)
            quota.take_extended("a", "h100", (("rdma/hca", 2),))
        assert state(quota) == (6, 6, 0, 6)
    assert state(quota) == before  # the inner undo was not undone again with the outer one
