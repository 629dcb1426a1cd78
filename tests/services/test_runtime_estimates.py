"""Finished runs filed in the store and learned back from it: which runs are filed, learning
only what is new, and a table that stays bounded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kiban.domain.runtime_estimate import JobFeatures
from kiban.services.runtime_estimates import RuntimeEstimates, job_features, record_finished
from kiban.store.db import make_engine, migrate, session_factory
from kiban.store.models import Job, RuntimeObservation
from kiban.testing import manifest


@pytest.fixture
def session(db_url: str) -> Iterator[Session]:
    engine = make_engine(db_url)
    migrate(engine)
    with session_factory(engine)() as opened:
        yield opened
    engine.dispose()


def finished_job(attempt: int = 1, started_at: float | None = 100.0) -> Job:
    return Job(
        id="train-abc12",
        name="train",
        tenant="vision",
        queue="vision-q",
        state="Succeeded",
        spec=manifest("train", replicas=2, gpu=4),
        submitted_at=50.0,
        started_at=started_at,
        attempt=attempt,
        gpus=8,
        submitted_by="alice",
    )


def rows(session: Session) -> list[tuple[str | None, float]]:
    query = select(RuntimeObservation.name, RuntimeObservation.runtime_s)
    return [(name, runtime) for name, runtime in session.execute(query.order_by("id"))]


def test_a_first_attempt_that_succeeded_is_filed_with_its_run_time(session: Session) -> None:
    record_finished(session, finished_job(), at=400.0)
    session.commit()
    assert rows(session) == [("train", 300.0)]
    stored = session.scalars(select(RuntimeObservation)).one()
    features = job_features(finished_job())
    assert (stored.member, stored.gpus, stored.command) == ("alice", 8, features.command)


@pytest.mark.parametrize(
    "job", [finished_job(attempt=2), finished_job(started_at=None)], ids=["retried", "never-ran"]
)
def test_a_retried_job_or_one_that_never_ran_is_not_filed(session: Session, job: Job) -> None:
    record_finished(session, job, at=400.0)
    session.commit()
    assert rows(session) == []


def test_refresh_learns_only_what_was_filed_since_its_last_look(session: Session) -> None:
    estimates = RuntimeEstimates()
    features = job_features(finished_job())
    for at in (400.0, 600.0):
        record_finished(session, finished_job(), at=at)
    session.commit()
    assert estimates.refresh(session) == 2
    assert estimates.refresh(session) == 0
    found = estimates.estimate(features)
    assert found is not None and found.seconds == 400.0  # median(300, 500)
    record_finished(session, finished_job(), at=1000.0)
    session.commit()
    assert estimates.refresh(session) == 1
    found = estimates.estimate(features)
    assert found is not None and (found.seconds, found.samples) == (500.0, 3)


def test_the_table_keeps_only_the_newest_rows_while_the_learner_keeps_what_it_learned(
    session: Session,
) -> None:
    estimates = RuntimeEstimates(max_rows=3, prune_every=1)
    for runtime in range(1, 11):
        record_finished(session, finished_job(), at=100.0 + runtime)
    session.commit()
    estimates.refresh(session, prune=True)
    assert rows(session) == [("train", 8.0), ("train", 9.0), ("train", 10.0)]
    assert estimates.error_summary()["observed"] == 10.0
    fresh = RuntimeEstimates()  # a restart learns back what is kept
    fresh.refresh(session)
    assert fresh.error_summary()["observed"] == 3.0
    assert session.scalar(select(func.count()).select_from(RuntimeObservation)) == 3


def test_a_trace_like_job_without_user_name_or_command_is_estimated_from_its_tenant_and_size(
    session: Session,
) -> None:
    estimates = RuntimeEstimates()
    for at in (400.0, 600.0):
        record_finished(session, finished_job(), at=at)
    session.commit()
    estimates.refresh(session)
    found = estimates.estimate(JobFeatures("vision", None, None, None, 8, "other-q"))
    assert found is not None and found.basis == "tenant+gpus (2 runs)"
