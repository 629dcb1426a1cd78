"""Traffic splits between a service's stable and canary revisions."""

from __future__ import annotations

import pytest

from kiban.domain.rollout import TrafficTargets, revision_name, traffic_split


@pytest.mark.parametrize(
    ("stable", "canary", "percent", "serving", "expected"),
    [
        # Both serve: the canary gets its share.
        (1, 2, 20, {1, 2}, {1: 80, 2: 20}),
        # The canary is still loading (or failed): the stable one keeps everything.
        (1, 2, 20, {1}, {1: 100}),
        # The stable one has no ready replica, the canary does: it serves alone.
        (1, 2, 20, {2}, {2: 100}),
        # Nothing is ready: requests go to the stable revision and wait there.
        (1, 2, 20, set(), {1: 100}),
        # A first revision (a canary at 100% with no stable one) takes all traffic.
        (None, 1, 100, set(), {1: 100}),
        (None, 1, 100, {1}, {1: 100}),
        # A canary at 0% or 100% leaves no empty share behind.
        (1, 2, 0, {1, 2}, {1: 100}),
        (1, 2, 100, {1, 2}, {2: 100}),
        # No live revision at all: nothing to route to.
        (None, None, 0, set(), {}),
    ],
)
def test_traffic_split(
    stable: int | None,
    canary: int | None,
    percent: int,
    serving: set[int],
    expected: dict[int, int],
) -> None:
    split = traffic_split(TrafficTargets(stable, canary, percent), serving)
    assert split == expected
    assert not split or sum(split.values()) == 100


def test_revision_names_sort_in_creation_order() -> None:
    names = [revision_name("chat", n) for n in (1, 2, 10, 100)]
    assert names == sorted(names)
    assert names[0] == "chat-00001"
