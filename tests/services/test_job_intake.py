"""A submission from its request body: checked inline when the body is small JSON and its queue
is in the lookup cache, else with the store (which fills the cache); the same answer both ways,
and bad input refused at once."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import Any

import pytest
from sqlalchemy.orm import Session

from kiban.domain.errors import SpecError
from kiban.domain.manifests import json_problem
from kiban.platform import Platform
from kiban.services.auth import Principal
from kiban.services.errors import InvalidInput
from kiban.services.job_intake import (
    INLINE_BODY_LIMIT,
    SubmissionBody,
    SubmissionContext,
    prepare_cached,
    prepare_with_store,
    read_manifest_body,
)

ADMIN = Principal(name="admin", tenant=None, is_admin=True)


def job(queue: str | None = None, replicas: int = 2, args: list[str] | None = None) -> Any:
    spec: dict[str, Any] = {"tasks": [{"replicas": replicas, "command": ["true", *(args or [])]}]}
    if queue is not None:
        spec["queue"] = queue
    return {"apiVersion": "kiban/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": spec}


def as_json(manifest: Any) -> SubmissionBody:
    return SubmissionBody(json.dumps(manifest).encode(), "application/json")


def context(platform: Platform) -> SubmissionContext:
    return SubmissionContext(
        facts=platform.facts, policy=platform.policy, at=100.0, lookups=platform.lookups
    )


class CountedSessions:
    """The platform's sessions, counting how many were opened."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.opened = 0

    def __call__(self) -> AbstractContextManager[Session]:
        self.opened += 1
        return self.platform.sessions()


def test_a_queue_not_cached_is_read_from_the_store_and_then_cached(platform: Platform) -> None:
    platform.lookups.clear()
    body = as_json(job())
    assert prepare_cached(body, ADMIN, context(platform)) is None
    sessions = CountedSessions(platform)
    stored = prepare_with_store(body, ADMIN, context(platform), sessions)
    assert sessions.opened == 1
    inline = prepare_cached(body, ADMIN, context(platform))
    assert inline is not None
    for prepared in (stored, inline):
        assert (prepared.job.queue, prepared.job.replicas, prepared.job.gpus) == ("default", 2, 0)
        assert [e.reason for e in prepared.events] == ["Submitted"]
    assert inline.job.id != stored.job.id


def test_yaml_and_large_bodies_are_checked_with_the_store(platform: Platform) -> None:
    prepare_with_store(as_json(job()), ADMIN, context(platform), CountedSessions(platform))
    yaml = SubmissionBody(b"apiVersion: kiban/v1\nkind: Job\n", "application/yaml")
    assert prepare_cached(yaml, ADMIN, context(platform)) is None
    large = as_json(job(args=["x" * INLINE_BODY_LIMIT]))
    assert prepare_cached(large, ADMIN, context(platform)) is None
    prepared = prepare_with_store(large, ADMIN, context(platform), CountedSessions(platform))
    assert prepared.job.queue == "default"


def test_bad_input_is_refused_inline_naming_the_field(platform: Platform) -> None:
    with pytest.raises(InvalidInput) as broken:
        prepare_cached(SubmissionBody(b"{", "application/json"), ADMIN, context(platform))
    assert broken.value.problems[0].field == ""
    with pytest.raises(SpecError) as no_tasks:  # as the API answers any: 422
        prepare_cached(as_json(job(replicas=0)), ADMIN, context(platform))
    assert no_tasks.value.problems[0].field == "spec.tasks[0].replicas"


def test_an_unknown_queue_is_refused_by_the_store(platform: Platform) -> None:
    body = as_json(job(queue="nowhere"))
    assert prepare_cached(body, ADMIN, context(platform)) is None  # not cached: never found
    with pytest.raises(InvalidInput) as missing:
        prepare_with_store(body, ADMIN, context(platform), CountedSessions(platform))
    assert [(p.field, p.message) for p in missing.value.problems] == [
        ("spec.queue", "queue nowhere does not exist")
    ]


def test_only_a_body_json_cannot_hold_is_walked_for_values_the_store_cannot_hold(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain JSON holds nothing the store cannot: its values are not walked again. A JSON body
    with ``NaN`` (which Python's reader takes) and any YAML are, and refused naming the field."""
    walked: list[dict[str, Any]] = []

    def counted(document: dict[str, Any]) -> tuple[str, str] | None:
        walked.append(document)
        return json_problem(document)

    monkeypatch.setattr("kiban.services.jobs.json_problem", counted)
    prepare_with_store(as_json(job()), ADMIN, context(platform), CountedSessions(platform))
    assert prepare_cached(as_json(job()), ADMIN, context(platform)) is not None
    assert walked == []
    nan = json.dumps(job()).replace('"true"', "NaN").encode()
    with pytest.raises(InvalidInput) as refused:
        prepare_cached(SubmissionBody(nan, "application/json"), ADMIN, context(platform))
    assert refused.value.problems[0].field == "spec.tasks[0].command[0]"
    yaml = SubmissionBody(json.dumps(job()).encode(), "application/yaml")
    prepare_with_store(yaml, ADMIN, context(platform), CountedSessions(platform))
    assert len(walked) == 2


@pytest.mark.parametrize(
    ("raw", "plain"),
    [
        (b'{"a": "NaN", "b": ["Infinity", "-Infinity"]}', True),  # the words, in strings only
        (b'{"a": 1.5, "b": [1e308]}', True),
        (b'{"a": NaN}', False),
        (b'{"a": "NaN", "b": [-Infinity]}', False),
        (b'{"a": "Infinity", "b": {"c": Infinity}}', False),
    ],
)
def test_a_json_body_is_plain_unless_it_holds_nan_or_infinity_as_a_value(
    raw: bytes, plain: bool
) -> None:
    document, read_plain = read_manifest_body(raw, "application/json")
    assert read_plain is plain
    assert json.dumps(document, allow_nan=True) == json.dumps(json.loads(raw), allow_nan=True)
