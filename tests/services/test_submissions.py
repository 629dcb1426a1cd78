"""Group commit of submissions (awaited on an event loop too), the lookup cache of the
submission path, and a submission's answer made from its job without reading it back."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kiban.api.schemas import job_out
from kiban.platform import Platform
from kiban.services import events, jobs
from kiban.services.job_listing import as_listed
from kiban.services.lookup_cache import LookupCache
from kiban.services.submissions import SubmissionWriter
from kiban.store.models import Event, Job
from kiban.testing import ManualClock


def job_and_event(job_id: str) -> tuple[Job, Event]:
    job = Job(
        id=job_id,
        name="x",
        tenant="default",
        queue="default",
        state="Pending",
        priority=1000,
        spec={"kind": "Job"},
        submitted_at=1.0,
        attempt=1,
    )
    event = events.new_event(
        kind="Job", name=job_id, reason="Submitted", message="m", at=1.0, tenant="default"
    )
    return job, event


def count(platform: Platform, model: type[Job] | type[Event]) -> int:
    with platform.sessions() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def test_many_submissions_are_stored_and_each_caller_is_answered(platform: Platform) -> None:
    writer = SubmissionWriter(platform.sessions, max_batch=16)
    futures = [writer.write(*job_and_event(f"job-{i}")) for i in range(100)]
    for future in futures:
        assert future.result(timeout=30) is None
    writer.stop()
    assert count(platform, Job) == 100
    assert count(platform, Event) >= 100


def test_a_batch_of_rows_setting_different_columns_is_stored_in_order(
    platform: Platform,
) -> None:
    """Rows of one batch that set different columns (here a priority, or its default) are
    each stored as set, and the events in the order they were written."""
    writer = SubmissionWriter(platform.sessions, max_batch=64)
    plain = [job_and_event(f"plain-{i}") for i in range(3)]
    for job, _ in plain:
        del job.priority  # left to the column's default (0)
    mixed = [plain[0], job_and_event("set-0"), plain[1], plain[2], job_and_event("set-1")]
    futures = [writer.write(job, event) for job, event in mixed]
    for future in futures:
        assert future.result(timeout=30) is None
    writer.stop()
    with platform.sessions() as session:
        priorities = {i: p for i, p in session.execute(select(Job.id, Job.priority))}
        written = select(Event.object_name).where(Event.object_kind == "Job").order_by(Event.id)
        names = list(session.scalars(written))
    assert priorities == {
        "plain-0": 0,
        "plain-1": 0,
        "plain-2": 0,
        "set-0": 1000,
        "set-1": 1000,
    }
    assert names == [job.id for job, _ in mixed]


def test_one_bad_submission_does_not_fail_the_others_in_its_batch(platform: Platform) -> None:
    gate = threading.Event()
    holding = threading.Event()
    opened = 0

    def gated_sessions() -> Session:
        # Hold the writer on a first batch so that the next writes queue up into one batch.
        nonlocal opened
        opened += 1
        if opened == 1:
            holding.set()
            gate.wait(5)
        return platform.sessions()

    writer = SubmissionWriter(gated_sessions, max_batch=64)  # type: ignore[arg-type]
    first = writer.write(*job_and_event("first"))
    assert holding.wait(5), "the writer never took the first batch"
    good = [writer.write(*job_and_event(f"good-{i}")) for i in range(5)]
    bad_job, bad_event = job_and_event("bad")
    bad_job.state = None  # type: ignore[assignment]  # NOT NULL: cannot be stored
    bad = writer.write(bad_job, bad_event)
    gate.set()
    first.result(timeout=30)
    for future in good:
        assert future.result(timeout=30) is None
    with pytest.raises(RuntimeError, match="could not be stored"):
        bad.result(timeout=30)
    writer.stop()
    assert count(platform, Job) == 6


def test_a_submission_whose_random_id_is_taken_is_stored_under_a_fresh_one(
    platform: Platform,
) -> None:
    """Ids end in 6 random characters: two jobs of one name meet now and then; the second
    must be stored all the same (it was answered 500 with its connection closed)."""
    writer = SubmissionWriter(platform.sessions)
    writer.write(*job_and_event("x-aaaaaa")).result(timeout=30)
    job, event = job_and_event("x-aaaaaa")
    assert writer.write(job, event).result(timeout=30) is None
    writer.stop()
    assert job.id != "x-aaaaaa" and re.fullmatch(r"x-[a-z0-9]{6}", job.id)
    with platform.sessions() as session:
        stored = session.get(Job, job.id)
        assert stored is not None and stored.name == "x"
        named = session.scalars(select(Event.object_name).order_by(Event.id)).all()
    assert named[-2:] == ["x-aaaaaa", job.id]  # its event names the id it was stored under


def test_an_id_taken_again_and_again_gives_up(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = SubmissionWriter(platform.sessions)
    writer.write(*job_and_event("x-aaaaaa")).result(timeout=30)
    monkeypatch.setattr(jobs, "new_job_id", lambda name: "x-aaaaaa")
    with pytest.raises(RuntimeError, match="could not be stored"):
        writer.write(*job_and_event("x-aaaaaa")).result(timeout=30)
    writer.stop()
    assert count(platform, Job) == 1


def test_rows_written_along_a_job_take_its_final_id_and_fail_with_it(
    platform: Platform,
) -> None:
    """A service's replica row goes in its job's transaction, under the id the job is stored
    with (a fresh one when its random one was taken); when the row cannot be written, neither
    is the job."""
    seen: list[str] = []

    def along(session: Session, job: Job) -> None:
        seen.append(job.id)
        session.add(events.new_event(kind="Job", name=job.id, reason="Along", message="", at=1.0))
        session.flush()

    def refused(session: Session, job: Job) -> None:
        raise sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("its service is gone"))

    writer = SubmissionWriter(platform.sessions)
    writer.write(*job_and_event("x-aaaaaa")).result(timeout=30)
    job, event = job_and_event("x-aaaaaa")
    assert writer.write(job, event, along=along).result(timeout=30) is None
    with pytest.raises(RuntimeError, match="could not be stored"):
        writer.write(*job_and_event("y-bbbbbb"), along=refused).result(timeout=30)
    writer.stop()
    assert seen[-1] == job.id != "x-aaaaaa"
    with platform.sessions() as session:
        alongside = session.scalars(select(Event.object_name).where(Event.reason == "Along"))
        assert list(alongside) == [job.id]
        assert session.get(Job, "y-bbbbbb") is None


def test_cache_keeps_found_values_for_its_ttl_only() -> None:
    clock = ManualClock()
    cache = LookupCache(ttl_s=0.2, clock=clock)
    loads: list[str] = []

    def load() -> str:
        loads.append("x")
        return "value"

    assert cache.get("k", load) == "value"
    clock.advance(0.19)
    assert cache.get("k", load) == "value"
    assert cache.peek("k") == "value"
    assert loads == ["x"]
    clock.advance(0.06)
    assert cache.peek("k") is None
    cache.get("k", load)
    assert loads == ["x", "x"]


def test_cache_never_keeps_a_miss_or_an_error() -> None:
    cache = LookupCache(ttl_s=60)
    assert cache.get("queue", lambda: None) is None
    assert cache.get("queue", lambda: "created since") == "created since"

    def fail() -> str:
        raise KeyError("nope")

    with pytest.raises(KeyError):
        cache.get("token", fail)
    assert cache.get("token", lambda: "valid") == "valid"


def test_a_repeated_submission_reads_neither_token_nor_queue_from_the_store(
    platform: Platform, api: TestClient
) -> None:
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "again"},
        "spec": {"tasks": [{"command": ["true"]}]},
    }
    assert api.post("/api/v1/jobs", json=document).status_code == 201
    statements: list[str] = []

    def remember(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    engines = [platform.engine, platform.control_engine]  # the API's; the writer's own
    for engine in engines:
        sqlalchemy.event.listen(engine, "before_cursor_execute", remember)
    try:
        answer = api.post("/api/v1/jobs", json=document)
    finally:
        for engine in engines:
            sqlalchemy.event.remove(engine, "before_cursor_execute", remember)
    assert answer.status_code == 201
    assert answer.json()["state"] == "Pending"
    reads = [s for s in statements if "api_tokens" in s or "FROM queues" in s]
    assert reads == []
    assert any(s.lstrip().upper().startswith("INSERT INTO JOBS") for s in statements)


def test_a_bad_token_is_refused_even_after_a_good_one_was_cached(api: TestClient) -> None:
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "a"},
        "spec": {"tasks": [{"command": ["true"]}]},
    }
    assert api.post("/api/v1/jobs", json=document).status_code == 201
    answer = api.post("/api/v1/jobs", json=document, headers={"Authorization": "Bearer nope"})
    assert answer.status_code == 401


def gated(platform: Platform) -> tuple[Callable[[], Session], threading.Event, threading.Event]:
    """Sessions whose first opening waits for ``gate``: the writer holds its first batch
    while the next submissions queue up into one batch (``holding`` says it took it)."""
    gate, holding = threading.Event(), threading.Event()
    opened = 0

    def sessions() -> Session:
        nonlocal opened
        opened += 1
        if opened == 1:
            holding.set()
            gate.wait(10)
        return platform.sessions()

    return sessions, gate, holding


def test_a_batch_awaited_on_a_loop_is_answered_with_one_call_to_it(platform: Platform) -> None:
    """49 submissions committed together wake their event loop once, not once each (each
    wake-up is a write to the loop's pipe and a turn of the loop, on the one interpreter)."""
    sessions, gate, holding = gated(platform)
    writer = SubmissionWriter(sessions, max_batch=64)  # type: ignore[arg-type]
    calls = 0

    async def submit() -> int:
        nonlocal calls
        loop = asyncio.get_running_loop()
        plain = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return plain(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
        first = asyncio.ensure_future(writer.stored(*job_and_event("first")))
        assert await asyncio.to_thread(holding.wait, 10), "the writer never took a batch"
        calls = 0  # to_thread's own answer came back through it
        rest = [writer.stored(*job_and_event(f"job-{i}")) for i in range(49)]
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, *rest), 30)
        return calls

    answered_with = asyncio.run(submit())
    writer.stop()
    assert count(platform, Job) == 50
    assert answered_with == 2  # the first batch, then the other 49 together


def test_an_awaited_submission_that_cannot_be_stored_raises_and_the_others_are_stored(
    platform: Platform,
) -> None:
    sessions, gate, holding = gated(platform)
    writer = SubmissionWriter(sessions, max_batch=64)  # type: ignore[arg-type]
    bad_job, bad_event = job_and_event("bad")
    bad_job.state = None  # type: ignore[assignment]  # NOT NULL: cannot be stored

    async def submit() -> list[BaseException | None]:
        first = asyncio.ensure_future(writer.stored(*job_and_event("first")))
        assert await asyncio.to_thread(holding.wait, 10), "the writer never took a batch"
        rest = [writer.stored(*job_and_event(f"good-{i}")) for i in range(3)]
        bad = writer.stored(bad_job, bad_event)
        gate.set()
        return await asyncio.wait_for(asyncio.gather(first, *rest, bad, return_exceptions=True), 30)

    answers = asyncio.run(submit())
    writer.stop()
    assert answers[:4] == [None] * 4
    assert isinstance(answers[4], RuntimeError) and "could not be stored" in str(answers[4])
    assert count(platform, Job) == 4


def test_a_cancelled_wait_leaves_the_submission_stored(platform: Platform) -> None:
    """A request that goes away stops waiting; its job is stored all the same and the writer
    goes on with the next ones."""
    sessions, gate, holding = gated(platform)
    writer = SubmissionWriter(sessions, max_batch=64)  # type: ignore[arg-type]

    async def submit() -> None:
        first = asyncio.ensure_future(writer.stored(*job_and_event("first")))
        assert await asyncio.to_thread(holding.wait, 10), "the writer never took a batch"
        gone = asyncio.ensure_future(writer.stored(*job_and_event("gone")))
        await asyncio.sleep(0)  # it has queued its job
        gone.cancel()
        gate.set()
        await asyncio.wait_for(first, 30)
        await asyncio.wait_for(writer.stored(*job_and_event("after")), 30)

    asyncio.run(submit())
    writer.stop()
    assert count(platform, Job) == 3


@pytest.mark.parametrize("held", [False, True])
def test_a_submitted_job_as_listed_gives_the_answer_the_job_gives(held: bool) -> None:
    """The answer to a submission is made from the job's values without SQLAlchemy's attribute
    per field; every field reads as the object's own (the columns it leaves unset: None)."""
    job, _ = job_and_event("train-abc123")
    job.gpus, job.replicas, job.submitted_by = 2, 2, "alice"
    if held:  # as a job waiting for its dependencies is answered
        job.reason_code = "WaitingForDependency"
        job.reason_message = "waiting for job a-1"
    expected = job_out(job).model_dump(by_alias=True)
    assert job_out(as_listed(job)).model_dump(by_alias=True) == expected
