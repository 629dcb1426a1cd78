"""Every event the control loop and its launcher record on a job gives a ``JobEventReason``
member, not a string of the same text: a reason is an enum wherever the control plane
emits one (the stored text is the member's value, so ``kiban describe`` reads the same)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loop_support import cancel

from kiban.domain.event_reasons import JobEventReason
from kiban.platform import Platform
from kiban.services import events  # recorded through events.record
from kiban.store.models import Event
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform


class Emitted:
    """The reasons of the events recorded while the loop runs a pass (not those of the API's
    submissions and cancels between passes)."""

    def __init__(self, platform: Platform, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reasons: list[object] = []
        self._in_pass = False
        recorded = events.record

        def watched(*args: object, **kwargs: object) -> Event:
            if self._in_pass:
                self.reasons.append(kwargs["reason"])
            return recorded(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(events, "record", watched)
        self.platform = platform

    def run_once(self) -> None:
        self._in_pass = True
        try:
            self.platform.loop.run_once()
        finally:
            self._in_pass = False


@pytest.fixture
def emitted(platform: Platform, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emitted]:
    yield Emitted(platform, monkeypatch)


def test_every_reason_the_loop_and_launcher_emit_is_the_enum(
    platform: Platform, executor: FakeExecutor, clock: ManualClock, emitted: Emitted
) -> None:
    ok = submit_to_platform(platform, manifest("ok", gpu=1))
    retried = submit_to_platform(
        platform, manifest("retried", gpu=1, restartPolicy="OnFailure", backoffLimit=1)
    )
    submit_to_platform(platform, manifest("late", gpu=1, maxRuntime="60s"))
    stubborn = submit_to_platform(platform, manifest("stubborn", terminationGracePeriod="5s"))
    emitted.run_once()
    executor.finish_all(ok)
    executor.finish(retried, 0, 1)
    executor.replicas[(stubborn, 1, 0)].ignores_sigterm = True
    cancel(platform, stubborn)
    emitted.run_once()
    emitted.run_once()  # retried: restarted
    executor.finish(retried, 0, 2)
    clock.advance(61)
    emitted.run_once()
    emitted.run_once()
    executor.fail_next_launch = "boom"
    submit_to_platform(platform, manifest("broken", gpu=1))
    emitted.run_once()

    assert emitted.reasons, "the passes recorded no event"
    assert [r for r in emitted.reasons if type(r) is not JobEventReason] == []
    assert {
        JobEventReason.ADMITTED,
        JobEventReason.STARTED,
        JobEventReason.RESTARTING,
        JobEventReason.LAUNCH_FAILED,
        JobEventReason.REPLICA_EXITED,
        JobEventReason.REPLICA_FAILED,
        JobEventReason.SUCCEEDED,
        JobEventReason.DEADLINE_EXCEEDED,
        JobEventReason.KILLED,
        JobEventReason.CANCELLED,
        JobEventReason.FAILED,
    } <= set(emitted.reasons)
