"""The service controller's prober, on its own: the model loader's failure read from the end
of a replica's log, and a replica that does not answer is not ready."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from tests.conftest import fake_nodes

from kiban.control.serving_probes import ReplicaProber
from kiban.executors.base import NoLogs
from kiban.testing import FakeExecutor


class OneLog(NoLogs):
    """Logs where every job's log is ``text`` (and reading it may fail)."""

    def __init__(self, text: str | Exception) -> None:
        self.text = text

    def read_log(self, job_id: str, rank: int, offset: int, limit: int) -> tuple[bytes, int]:
        if isinstance(self.text, Exception):
            raise self.text
        data = self.text.encode()[offset : offset + limit]
        return data, offset + len(data)


@pytest.fixture
def prober() -> Iterator[ReplicaProber]:
    made = ReplicaProber(FakeExecutor(fake_nodes()))
    yield made
    made.close()


@pytest.mark.parametrize(
    ("log", "said"),
    [
        ("loading\nKIBAN_LOAD_FAILED: no model at /models/x\n", "no model at /models/x"),
        ("KIBAN_LOAD_FAILED: first\nKIBAN_LOAD_FAILED: last\n", "last"),  # the newest line
        ("KIBAN_LOAD_FAILED:\n", "the model failed to load"),
        ("serving on :8000\n", None),
        (OSError("gone"), None),  # a log that cannot be read says nothing
    ],
)
def test_the_load_failure_is_the_last_line_the_loader_wrote(
    prober: ReplicaProber, log: str | Exception, said: str | None
) -> None:
    executor = prober.executor
    assert isinstance(executor, FakeExecutor)
    executor.offers = dataclasses.replace(executor.offers, logs=OneLog(log))
    assert prober.load_failure("chat-00001-0") == said


def test_a_replica_that_does_not_answer_is_not_ready(prober: ReplicaProber) -> None:
    assert not prober.ready("127.0.0.1:1", "/v2/health/ready", 0.5)  # nothing listens
