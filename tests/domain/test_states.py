"""The job lifecycle: which moves are allowed, and what terminal and holding resources mean."""

from __future__ import annotations

import pytest

from kiban.domain.states import ALLOWED, TERMINAL, JobState


def test_every_state_has_an_entry() -> None:
    assert set(ALLOWED) == set(JobState)


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_terminal_states_have_no_exits(state: JobState) -> None:
    assert state.terminal
    assert ALLOWED[state] == frozenset()


@pytest.mark.parametrize("state", sorted(set(JobState) - TERMINAL))
def test_every_live_state_can_end(state: JobState) -> None:
    """No job can get stuck: each non-terminal state reaches a terminal one."""
    seen, frontier = {state}, [state]
    while frontier:
        for nxt in ALLOWED[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert not state.terminal
    assert seen & TERMINAL == TERMINAL


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (JobState.PENDING, JobState.ADMITTED),
        (JobState.PENDING, JobState.CANCELLED),
        (JobState.ADMITTED, JobState.RUNNING),
        (JobState.ADMITTED, JobState.PENDING),  # recovery after a restart mid-launch
        (JobState.ADMITTED, JobState.FAILED),  # launch error
        (JobState.RUNNING, JobState.SUCCEEDED),
        (JobState.RUNNING, JobState.STOPPING),
        (JobState.STOPPING, JobState.CANCELLED),
        (JobState.STOPPING, JobState.FAILED),
        (JobState.STOPPING, JobState.ADMITTED),  # restart on the same placement
    ],
)
def test_moves_the_control_loop_makes_are_allowed(src: JobState, dst: JobState) -> None:
    assert dst in ALLOWED[src]


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (JobState.PENDING, JobState.RUNNING),  # must be admitted (placed) first
        (JobState.PENDING, JobState.SUCCEEDED),
        (JobState.PENDING, JobState.STOPPING),
        (JobState.RUNNING, JobState.CANCELLED),  # a running job is stopped before it is cancelled
        (JobState.STOPPING, JobState.SUCCEEDED),
        (JobState.STOPPING, JobState.RUNNING),
    ],
)
def test_shortcuts_are_not_allowed(src: JobState, dst: JobState) -> None:
    assert dst not in ALLOWED[src]


@pytest.mark.parametrize(
    ("state", "holds"),
    [
        (JobState.PENDING, False),
        (JobState.ADMITTED, True),
        (JobState.RUNNING, True),
        (JobState.STOPPING, True),
        (JobState.SUCCEEDED, False),
        (JobState.FAILED, False),
        (JobState.CANCELLED, False),
    ],
)
def test_which_states_hold_resources(state: JobState, holds: bool) -> None:
    assert state.holds_resources is holds
    assert not (state.holds_resources and state.terminal)


def test_states_are_their_wire_names() -> None:
    assert [s.value for s in JobState] == [
        "Pending",
        "Admitted",
        "Running",
        "Stopping",
        "Succeeded",
        "Failed",
        "Cancelled",
    ]
    assert JobState("Running") is JobState.RUNNING
