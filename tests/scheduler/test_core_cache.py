"""The running index kept across cycles equals one built afresh, whatever started or ended."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from kiban.scheduler.core_cache import RunningIndex, loss_key
from kiban.scheduler.snapshot import RunningJob, RunningReplica


def running_job(i: int, queue: str, priority: int, started: float) -> RunningJob:
    return RunningJob(
        id=f"j{i}",
        queue=queue,
        tenant=queue,
        priority=priority,
        submitted_at=0.0,
        started_at=started,
        replicas=(RunningReplica("n", (0,), 0, 0),),
        flavor_gpus={"default": 1},
    )


def contents(index: RunningIndex, queues: list[str]) -> dict[str, list[str]]:
    return {q: [j.id for j in index.in_queue(q)] for q in queues}


Step = tuple[str, int, str, int, int]
step = st.tuples(
    st.sampled_from(["start", "end", "checkpoint"]),
    st.integers(0, 30),
    st.sampled_from(["a", "b", "c"]),
    st.integers(0, 2),
    st.integers(0, 100),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(step, max_size=8), min_size=1, max_size=8))
def test_a_kept_index_equals_a_fresh_one(rounds: list[list[Step]]) -> None:
    kept = RunningIndex()
    jobs: dict[str, RunningJob] = {}
    for changes in rounds:
        for what, i, queue, priority, at in changes:
            name = f"j{i}"
            if what == "start" and name not in jobs:
                jobs[name] = running_job(i, queue, priority, float(at))
            elif what == "end":
                jobs.pop(name, None)
            elif what == "checkpoint" and name in jobs:
                jobs[name] = dataclasses.replace(jobs[name], last_progress_at=float(at + 200))
        running = tuple(jobs.values())
        kept.update(running)
        fresh = RunningIndex()
        fresh.update(running)
        assert contents(kept, ["a", "b", "c"]) == contents(fresh, ["a", "b", "c"])
        for q in ("a", "b", "c"):
            keys = [loss_key(j) for j in kept.in_queue(q)]
            assert keys == sorted(keys)


def test_least_loss_first() -> None:
    """Lower priority first; then the freshest checkpoint (least work lost); then the most
    recently started."""
    old = running_job(1, "q", 1, started=0.0)
    checkpointed = dataclasses.replace(running_job(2, "q", 1, started=0.0), last_progress_at=50.0)
    recent = running_job(3, "q", 1, started=40.0)
    low = running_job(4, "q", 0, started=0.0)
    index = RunningIndex()
    index.update((old, checkpointed, recent, low))
    assert [j.id for j in index.in_queue("q")] == ["j4", "j2", "j3", "j1"]
