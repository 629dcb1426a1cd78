"""GPU-seconds a tenant held in a window: closed records clipped to it, open ones up to now."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from kiban.services.accounting import gpu_seconds_used
from kiban.store.db import make_engine, migrate, session_factory
from kiban.store.models import UsageRecord


@pytest.fixture
def session(db_url: str) -> Iterator[Session]:
    engine = make_engine(db_url)
    migrate(engine)
    with session_factory(engine)() as s:
        yield s
    engine.dispose()


def record(
    job: str,
    start: float,
    end: float | None,
    *,
    gpus: int = 1,
    tenant: str = "vision",
    queue: str = "train",
) -> UsageRecord:
    return UsageRecord(
        kind="job",
        job_id=job,
        attempt=1,
        tenant=tenant,
        member="ana",
        queue=queue,
        flavor=None,
        gpus=gpus,
        cpu_millis=1000,
        memory=2**30,
        started_at=start,
        ended_at=end,
        gpu_seconds=None if end is None else gpus * (end - start),
        outcome=None if end is None else "succeeded",
    )


@pytest.mark.parametrize(
    ("since", "until", "now", "queue", "expected"),
    [
        # a: 2 GPUs 0..100; b: 1 GPU 50..150 (queue dev); c: 4 GPUs open since 120; other tenant
        (0, 1000, 200, None, 2 * 100 + 1 * 100 + 4 * 80),
        (60, 1000, 200, None, 2 * 40 + 1 * 90 + 4 * 80),  # clipped at the start
        (0, 130, 200, None, 2 * 100 + 1 * 80 + 4 * 10),  # clipped at the end
        (0, 1000, 130, None, 2 * 100 + 1 * 100 + 4 * 10),  # open one counted up to now only
        (0, 1000, 200, "dev", 1 * 100),
        (150, 160, 155, "dev", 0),  # b ended exactly at since
        (300, 400, 200, None, 0),  # a window after now
    ],
)
def test_gpu_seconds_used_clips_to_the_window(
    session: Session, since: float, until: float, now: float, queue: str | None, expected: float
) -> None:
    session.add_all(
        [
            record("a", 0, 100, gpus=2),
            record("b", 50, 150, queue="dev"),
            record("c", 120, None, gpus=4),
            record("x", 0, 1000, gpus=8, tenant="nlp"),
            record("cpu", 0, 1000, gpus=0),
        ]
    )
    session.commit()
    used = gpu_seconds_used(
        session, tenant="vision", since=since, until=until, now=now, queue=queue
    )
    assert used == pytest.approx(expected)
