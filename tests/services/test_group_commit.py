"""The group commit shared by the submission writer and the audit log: the first item is
committed at once, the items queued during a commit share the next (up to ``max_batch``), in
order; a batch whose commit raises does not stop the thread."""

from __future__ import annotations

import threading

import pytest

from kiban.services.group_commit import GroupCommit


class Recorder:
    """A commit that records its batches; the first waits for ``gate`` (items queue behind)."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.started = threading.Event()
        self.fail_on = fail_on

    def __call__(self, batch: list[int]) -> None:
        if not self.batches:
            self.started.set()
            assert self.gate.wait(30)
        self.batches.append(list(batch))
        if batch[0] == self.fail_on:
            raise RuntimeError("refused")


@pytest.mark.parametrize(
    ("max_batch", "batches"),
    [
        (100, [[0], list(range(1, 20))]),
        (8, [[0], list(range(1, 9)), list(range(9, 17)), [17, 18, 19]]),
    ],
)
def test_items_queued_during_a_commit_share_the_next(
    max_batch: int, batches: list[list[int]]
) -> None:
    commit = Recorder()
    group = GroupCommit(commit, max_batch, name="test-group")
    group.put(0)
    assert commit.started.wait(30)  # committed at once, alone: no linger
    for n in range(1, 20):
        group.put(n)
    commit.gate.set()
    assert group.flush(30)
    group.stop()
    assert commit.batches == batches


def test_a_batch_that_raises_does_not_stop_the_thread() -> None:
    commit = Recorder(fail_on=0)
    commit.gate.set()
    group = GroupCommit(commit, 10, name="test-group")
    group.put(0)
    assert group.flush(30)
    group.put(1)
    assert group.flush(30)
    group.stop()
    assert commit.batches == [[0], [1]]


def test_stop_commits_what_is_queued_and_a_later_put_starts_again() -> None:
    commit = Recorder()
    group = GroupCommit(commit, 10, name="test-group")
    group.put(0)
    assert commit.started.wait(30)
    group.put(1)
    commit.gate.set()
    group.stop()
    assert commit.batches == [[0], [1]]
    group.put(2)
    assert group.flush(30)
    group.stop()
    assert commit.batches == [[0], [1], [2]]


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch must be at least 1, not 0"):
        GroupCommit(Recorder(), 0, name="test-group")
