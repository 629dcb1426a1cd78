"""The loop's node sync: a loop is whole when made, its ``on_nodes_changed`` given at
construction and called once per change of the executor's nodes, after they are stored; the
platform's submission facts follow the nodes through it."""

from __future__ import annotations

import pytest
from tests.conftest import fake_nodes

from kiban.control.loop import ControlLoop
from kiban.control.loop_settings import LoopSettings
from kiban.platform import Platform
from kiban.testing import FakeExecutor, ManualClock


def test_a_loop_is_given_what_to_call_when_the_nodes_change(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    seen: list[set[str]] = []

    def nodes_changed() -> None:
        seen.append({n.name for n in platform.executor.nodes()})

    loop = ControlLoop(
        platform.control_sessions,
        executor,
        clock=clock,
        settings=LoopSettings(node_sync_s=1.0),
        on_nodes_changed=nodes_changed,
    )
    loop.run_once()  # the first sync stores the nodes the loop had not seen yet
    assert len(seen) == 1
    clock.advance(2.0)
    loop.run_once()  # the same nodes: nothing changed
    assert len(seen) == 1
    executor.set_nodes(fake_nodes(count=5))
    clock.advance(2.0)
    loop.run_once()
    assert seen[-1] == {f"node-{i}" for i in range(5)}
    assert len(seen) == 2


def test_a_loop_has_no_callback_to_poke_in_after_it_is_made(
    platform: Platform, executor: FakeExecutor
) -> None:
    assert not hasattr(ControlLoop(platform.control_sessions, executor), "on_nodes_changed")


@pytest.mark.parametrize("loop_settings", [LoopSettings(node_sync_s=1.0)])
def test_submission_facts_follow_the_nodes_the_loop_stores(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    assert len(platform.facts.nodes) == 3
    executor.set_nodes(fake_nodes(count=4, gpus=8))
    clock.advance(2.0)
    platform.loop.run_once()
    assert len(platform.facts.nodes) == 4
    assert platform.facts.max_gpus == 8


def test_a_loop_is_given_its_health_hooks_when_made(
    platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    """The active checks (sweeps, the epilogue, notebooks' culling) are construction arguments,
    run by each pass; the platform's loop has its three, and none can be added afterwards."""
    seen: list[float] = []

    def hook(now: float) -> bool:
        seen.append(now)
        return False

    loop = ControlLoop(platform.control_sessions, executor, clock=clock, health_hooks=(hook,))
    loop.run_once()
    assert seen == [clock.now()]
    assert isinstance(loop.health_hooks, tuple)
    assert platform.sweeps is not None and platform.notebooks is not None
    assert [h.__self__ for h in platform.loop.health_hooks][::2] == [  # type: ignore[attr-defined]
        platform.sweeps,
        platform.notebooks,
    ]
    assert len(platform.loop.health_hooks) == 3
