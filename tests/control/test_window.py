"""Which submissions stand behind a queue's full window (and so ask for no pass)."""

from __future__ import annotations

import pytest

from kiban.control.window import WindowEnds
from kiban.testing import job


def ends_of(window: int, *jobs: tuple[str, int, float]) -> WindowEnds:
    """Window ends taken from a pass that read these (queue, priority, submitted_at) jobs."""
    ends = WindowEnds()
    ends.begin()
    pending = [
        job(f"j{i}").queue(queue).priority(priority).submitted(at).build()
        for i, (queue, priority, at) in enumerate(jobs)
    ]
    assert not ends.update(pending, window)
    return ends


FULL = ends_of(3, ("a", 10, 1.0), ("a", 0, 2.0), ("a", 0, 3.0), ("b", 0, 1.0))


@pytest.mark.parametrize(
    ("queue", "priority", "at", "behind"),
    [
        ("a", 0, 9.0, True),  # later than the window's last job: behind
        ("a", 0, 3.0, False),  # a tie: the store breaks it by id, which is not compared
        ("a", 0, 2.5, False),  # earlier than the last job: it would be in the window
        ("a", 1, 9.0, False),  # a higher priority goes ahead of the last job
        ("a", -1, 0.0, True),  # a lower priority goes after it, whenever submitted
        ("b", 0, 9.0, False),  # b's window is not full: any new job is in it
        ("c", 0, 9.0, False),  # a queue the pass did not read
    ],
)
def test_behind_a_full_window(queue: str, priority: int, at: float, behind: bool) -> None:
    assert FULL.behind(queue, priority, at) is behind


def test_before_any_pass_no_job_is_behind() -> None:
    assert not WindowEnds().behind("a", -100, 1e12)


def test_a_submission_stored_while_a_pass_read_is_checked_against_its_new_ends() -> None:
    ends = ends_of(2, ("a", 0, 1.0), ("a", 0, 2.0))
    ends.begin()  # a pass reads the store; meanwhile a job of a is stored
    assert ends.behind("a", 0, 2.5)  # behind the old ends: no pass asked for yet
    # The pass read a window that ends earlier (a job of priority 5 entered): still behind.
    later = [job("x").queue("a").priority(5).submitted(0.5).build()]
    later.append(job("y").queue("a").submitted(1.0).build())
    assert not ends.update(later, 2)
    # But when the new window ends later (jobs ahead left), the job may be in it: ask again.
    ends.begin()
    assert ends.behind("a", 0, 2.5)
    wider = [job("y").queue("a").submitted(1.0).build(), job("z").queue("a").submitted(3.0).build()]
    assert ends.update(wider, 2)


def test_after_a_failed_pass_every_submission_asks_for_one() -> None:
    ends = ends_of(1, ("a", 0, 1.0))
    assert ends.behind("a", 0, 5.0)
    ends.begin()
    ends.forget()
    assert not ends.behind("a", 0, 5.0)
