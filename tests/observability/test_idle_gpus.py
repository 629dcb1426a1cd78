"""Idle GPUs as a table: readings over time to the jobs called idle and the events they get."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest

from kiban.observability.idle_gpus import HeldJob, IdleState, IdleVerdict, NodeUse, judge_idle

WINDOW = 600.0
THRESHOLD = 5.0


def job(name: str = "j", gpus: Sequence[tuple[str, int]] = (("n1", 0), ("n1", 1))) -> HeldJob:
    return HeldJob(name, "team", "q", started_at=0.0, gpus=tuple(gpus))


def use(taken_at: float, **percent: float | None) -> NodeUse:
    """``use(100, g0=1.0, g1=None)``: GPU 0 at 1 %, GPU 1 not read."""
    return NodeUse(taken_at, {int(k[1:]): v for k, v in percent.items()})


@dataclass(frozen=True)
class Step:
    """At ``now``, with these readings: the idle GPUs per job, and the jobs given an event."""

    now: float
    readings: Mapping[str, NodeUse]
    idle: Mapping[str, int]
    events: tuple[str, ...] = ()


def run(jobs: Sequence[HeldJob], steps: Sequence[Step]) -> None:
    state = IdleState()
    for i, step in enumerate(steps):
        verdict: IdleVerdict = judge_idle(
            jobs, step.readings, state, threshold_percent=THRESHOLD, window_s=WINDOW, now=step.now
        )
        assert {j.job: j.idle_gpus for j in verdict.idle} == dict(step.idle), f"step {i}"
        assert tuple(j.job for j in verdict.newly_idle) == step.events, f"step {i}"
        state = verdict.state


CASES: list[tuple[str, list[HeldJob], list[Step]]] = [
    (
        "idle for the whole window: one event, then none while it stays idle",
        [job()],
        [
            Step(100, {"n1": use(100, g0=1, g1=2)}, {}),
            Step(650, {"n1": use(650, g0=1, g1=2)}, {}),
            Step(700, {"n1": use(700, g0=0, g1=0)}, {"j": 2}, ("j",)),
            Step(2000, {"n1": use(2000, g0=0, g1=0)}, {"j": 2}),
        ],
    ),
    (
        "a busy reading ends the spell; the next spell gets its own event",
        [job()],
        [
            Step(100, {"n1": use(100, g0=1, g1=1)}, {}),
            Step(700, {"n1": use(700, g0=1, g1=1)}, {"j": 2}, ("j",)),
            Step(800, {"n1": use(800, g0=90, g1=1)}, {"j": 1}),
            Step(900, {"n1": use(900, g0=1, g1=1)}, {"j": 1}),
            Step(1500, {"n1": use(1500, g0=1, g1=1)}, {"j": 2}, ("j",)),
        ],
    ),
    (
        "at the threshold is busy, under it idle",
        [job(gpus=[("n1", 0)])],
        [
            Step(0, {"n1": use(0, g0=5.0)}, {}),
            Step(700, {"n1": use(700, g0=5.0)}, {}),
            Step(800, {"n1": use(800, g0=4.9)}, {}),
            Step(1400, {"n1": use(1400, g0=4.9)}, {"j": 1}, ("j",)),
        ],
    ),
    (
        "some GPUs idle: counted in the metric, no event for the job",
        [job()],
        [
            Step(0, {"n1": use(0, g0=0, g1=80)}, {}),
            Step(700, {"n1": use(700, g0=0, g1=80)}, {"j": 1}),
        ],
    ),
    (
        "a GPU not read is not counted: the others decide",
        [job()],
        [
            Step(0, {"n1": use(0, g0=0, g1=None)}, {}),
            Step(700, {"n1": use(700, g0=0, g1=None)}, {"j": 1}, ("j",)),
        ],
    ),
    (
        "no reading at all: nothing known, nothing idle",
        [job()],
        [Step(0, {}, {}), Step(5000, {}, {})],
    ),
    (
        "a reading older than the window (agent gone) is unknown, even if it said idle",
        [job(gpus=[("n1", 0)])],
        [
            Step(0, {"n1": use(0, g0=0)}, {}),
            Step(599, {"n1": use(0, g0=0)}, {}),
            Step(601, {"n1": use(0, g0=0)}, {}),
        ],
    ),
    (
        "a reading taken before the job started says nothing about it",
        [HeldJob("late", "team", "q", started_at=1000.0, gpus=(("n1", 0),))],
        [
            Step(1000, {"n1": use(900, g0=0)}, {}),
            Step(1500, {"n1": use(1100, g0=0)}, {}),
            Step(1700, {"n1": use(1700, g0=0)}, {"late": 1}, ("late",)),
        ],
    ),
    (
        "a gap in the readings restarts a GPU's window but does not end an announced spell",
        [job(gpus=[("n1", 0)])],
        [
            Step(0, {"n1": use(0, g0=0)}, {}),
            Step(600, {"n1": use(600, g0=0)}, {"j": 1}, ("j",)),
            Step(700, {}, {}),
            Step(800, {"n1": use(800, g0=0)}, {}),
            Step(1400, {"n1": use(1400, g0=0)}, {"j": 1}),
        ],
    ),
    (
        "jobs on several nodes are judged apart",
        [job("a", [("n1", 0), ("n2", 0)]), job("b", [("n1", 1)])],
        [
            Step(0, {"n1": use(0, g0=0, g1=0), "n2": use(0, g0=0)}, {}),
            Step(
                600, {"n1": use(600, g0=0, g1=0), "n2": use(600, g0=70)}, {"a": 1, "b": 1}, ("b",)
            ),
        ],
    ),
]


@pytest.mark.parametrize(("jobs", "steps"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_idle_gpus(jobs: list[HeldJob], steps: list[Step]) -> None:
    run(jobs, steps)


def test_a_job_that_ended_is_forgotten() -> None:
    first = judge_idle(
        [job()], {"n1": use(0, g0=0, g1=0)}, IdleState(), threshold_percent=5, window_s=0, now=0
    )
    assert first.state.announced == {"j"}
    after = judge_idle([], {}, first.state, threshold_percent=5, window_s=0, now=1)
    assert after.state == IdleState({}, frozenset())
