"""What a judgement costs that a reader can tell: a failed gang placement leaves no placement
objects behind, the undo log of a what-if holds plain entries, and the state a cycle's verdicts
key on comes back when a what-if is undone."""

from __future__ import annotations

import pytest

from kiban.scheduler import placement
from kiban.scheduler.capacity import CapacityOverlay
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.scheduler.placement import place_gang
from kiban.testing import cluster, job

GIB = 2**30


def _overlay() -> CapacityOverlay:
    nodes = cluster().node("a", gpus=4, cpu_millis=8000, memory=64 * GIB).node("b", gpus=2)
    return CapacityOverlay.of(nodes.build())


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[ReplicaPlacement]:
    made: list[ReplicaPlacement] = []

    def make(*args: object, **kwargs: object) -> ReplicaPlacement:
        made.append(ReplicaPlacement(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(placement, "ReplicaPlacement", make)
    return made


def test_a_gang_that_does_not_fit_makes_no_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _counting(monkeypatch)
    o = _overlay()
    attempt = place_gang(job("g").replicas(4, gpu=2).build(), o)
    assert not attempt.fits and attempt.placed == 3  # three replicas found room, then none
    assert made == []  # the three were never written out as placements
    assert o.pristine  # and their capacity was given back


def test_a_gang_that_fits_gets_its_placements_in_rank_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _counting(monkeypatch)
    o = _overlay()
    attempt = place_gang(job("g").replicas(3, gpu=2).build(), o)
    assert attempt.fits and attempt.placed == 3
    assert [(p.index, p.rank) for p in attempt.placements] == [(0, 0), (1, 1), (2, 2)]
    assert sorted(p.node for p in attempt.placements) == ["a", "a", "b"]
    assert list(attempt.placements) == made
    assert o.total_free_gpus() == 0


def test_an_undone_what_if_gives_the_judging_mark_back() -> None:
    o = _overlay()
    before = o.judging_mark()
    assert before == (0, True, 0)
    with o.transaction() as tx:
        o.take("a", 2, 0, 0)
        assert o.judging_mark()[:2] == (o.state, False)
        assert tx.changes == [(True, "a", (0, 1), 0, 0, ())]  # plain entries, no objects
    assert o.judging_mark() == before
    o.take("b", 1, 0, 0)
    assert o.judging_mark()[:2] == (o.state, False) and o.state != 0
