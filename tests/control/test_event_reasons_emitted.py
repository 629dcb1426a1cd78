"""Every event the control loop, its launcher and the service controller record gives a
member of ``JobEventReason`` or ``ServiceEventReason``, not a string of the same text: a
reason is an enum wherever the control plane emits one (the stored text is the member's
value, so ``kiban describe`` reads the same)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loop_support import cancel
from sqlalchemy import select
from test_service_controller import ALICE, Probe, apply, service_doc

from kiban.domain.event_reasons import JobEventReason, ServiceEventReason
from kiban.platform import Platform
from kiban.services import events, serving
from kiban.store.models import Event, Job
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform


class Emitted:
    """The reasons of the events made while a pass runs (``run_once`` of the loop or the
    service controller; not those of the API's submissions and cancels between passes)."""

    def __init__(self, platform: Platform, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reasons: list[object] = []
        self._in_pass = False
        made = events.new_event  # what events.record and a submission's events are made with

        def watched(*args: object, **kwargs: object) -> Event:
            if self._in_pass:
                self.reasons.append(kwargs["reason"])
            return made(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(events, "new_event", watched)
        self.platform = platform

    def run_once(self) -> None:
        self._in_pass = True
        try:
            self.platform.loop.run_once()
        finally:
            self._in_pass = False

    def services_run_once(self) -> None:
        self._in_pass = True
        try:
            self.platform.services.run_once()
        finally:
            self._in_pass = False

    def settle(self, passes: int = 3) -> None:
        for _ in range(passes):
            self.services_run_once()
            self.run_once()
        self.services_run_once()


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


def test_every_reason_the_service_controller_emits_is_an_enum(
    platform: Platform, executor: FakeExecutor, emitted: Emitted
) -> None:
    probe = Probe()
    platform.services.probe = probe
    apply(platform, service_doc(minReplicas=2, maxReplicas=2))
    probe.all = True
    emitted.settle()
    broken = service_doc(minReplicas=2, maxReplicas=2, canaryTrafficPercent=50)
    broken["spec"]["model"]["storageUri"] = "file:///models/missing"
    apply(platform, broken)
    probe.all = False
    emitted.settle(passes=2)
    with platform.sessions() as session:
        canary = [j for j in session.scalars(select(Job)) if "00002" in j.name]
    for job in canary:
        if executor.running(job.id):
            executor.running(job.id)[0].log += b"KIBAN_LOAD_FAILED: no model files\n"
            executor.finish_all(job.id, exit_code=3)
    emitted.settle()
    with platform.sessions() as session:
        serving.delete(session, ALICE, "chat", platform.clock.now())
        session.commit()
    emitted.settle(passes=4)

    assert [r for r in emitted.reasons if type(r) not in (JobEventReason, ServiceEventReason)] == []
    assert {
        JobEventReason.SUBMITTED,
        JobEventReason.CANCELLING,
        ServiceEventReason.REVISION_READY,
        ServiceEventReason.REVISION_FAILED,
        ServiceEventReason.REMOVED,
    } <= set(emitted.reasons)
