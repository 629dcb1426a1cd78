"""A request's objects are freed when it ends, not left to the cyclic garbage collector: each
cycle through a request's scope made tens of thousands of objects a young collection had to
find and free under load, and its pause delayed every request in flight (issue 21's tail)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from kiban.api.audit_trail import AuditDraft

JOB = {
    "apiVersion": "kiban/v1",
    "kind": "Job",
    "metadata": {"name": "train"},
    "spec": {"tasks": [{"replicas": 1, "resources": {"gpu": 1}, "command": ["python", "t.py"]}]},
}


@pytest.fixture
def no_collection() -> Iterator[None]:
    """The cyclic collector off: what is still alive afterwards was freed by nothing else."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def drafts() -> int:
    """Audit drafts alive now (by exact type: ``isinstance`` would read every object's
    ``__class__``, and some modules' lazy attributes warn when read)."""
    return sum(1 for o in gc.get_objects() if type(o) is AuditDraft)


def test_an_audited_submission_leaves_nothing_for_the_cyclic_collector(
    api: TestClient, no_collection: None
) -> None:
    before = drafts()
    for _ in range(20):
        assert api.post("/api/v1/jobs", json=JOB).status_code == 201
    # its audit draft referred to its scope, which held the draft: a cycle, and with it the
    # request's scope, its exit stacks and headers, until a collection
    assert drafts() == before
