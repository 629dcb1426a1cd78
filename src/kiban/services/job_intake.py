"""A job submission from the body of a request to a row ready to store.

Submissions are the API's hot path. A small JSON body whose queue is in the lookup cache is
checked at once, with no store connection (``prepare_cached``); any other is checked where the
store may be read (``prepare_with_store``, on a worker thread). Both give the same answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.job_relations import DEFAULT_MAX_ARRAY_SIZE, Relations
from kiban.domain.manifests import JobSubmission, load_document
from kiban.services import dependencies, job_arrays, jobs
from kiban.services.auth import Principal
from kiban.services.errors import invalid
from kiban.services.lookup_cache import LookupCache
from kiban.store.models import Queue

MAX_MANIFEST_BYTES = 1024 * 1024
INLINE_BODY_LIMIT = 64 * 1024
"""Larger manifests are parsed where the store may be read (a worker thread), not inline."""


def parse_manifest_body(raw: bytes, content_type: str) -> dict[str, Any]:
    """The manifest in a request body: JSON, or YAML (which also reads JSON)."""
    return read_manifest_body(raw, content_type)[0]


def read_manifest_body(raw: bytes, content_type: str) -> tuple[dict[str, Any], bool]:
    """The manifest in a request body, and whether it is plain JSON: read as JSON, with no
    ``NaN`` or ``Infinity`` (which Python's reader takes): then every value is one the store
    can hold, and ``kiban.domain.manifests.json_problem`` need not walk it."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise invalid("", "manifest larger than 1 MiB")
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise invalid("", "the manifest is not UTF-8 text") from None
    try:
        if "json" in content_type:
            try:
                data = json.loads(text)  # the shared reader: none is made for the call
            except json.JSONDecodeError as exc:
                raise invalid(
                    "", f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
                ) from None
            if not isinstance(data, dict):
                raise invalid("", "a manifest must be a JSON object")
            return data, not _has_constants(text)
        return load_document(text), False
    except RecursionError:
        raise invalid("", "the manifest is nested too deeply") from None


def _has_constants(text: str) -> bool:
    """Whether the JSON ``text`` holds ``NaN``, ``Infinity`` or ``-Infinity`` as a value (read
    again, counting them, only when the words are in it at all: in a string, say)."""
    if "NaN" not in text and "Infinity" not in text:
        return False
    constants: list[str] = []

    def constant(name: str) -> float:
        constants.append(name)
        return float(name)  # as json.loads: NaN, Infinity, -Infinity

    json.loads(text, parse_constant=constant)
    return bool(constants)


@dataclass(frozen=True)
class SubmissionBody:
    """A submitted manifest as the request carried it."""

    raw: bytes
    content_type: str

    @property
    def small_json(self) -> bool:
        """Whether it is parsed cheaply enough to check on the event loop."""
        return "json" in self.content_type and len(self.raw) <= INLINE_BODY_LIMIT

    def document(self) -> tuple[dict[str, Any], bool]:
        """The manifest, and whether it is plain JSON (``read_manifest_body``)."""
        return read_manifest_body(self.raw, self.content_type)


@dataclass(frozen=True)
class SubmissionContext:
    """What a submission is checked against besides its caller: the cluster, the policy in
    force, the time, and the cache of queues."""

    facts: jobs.ClusterFacts
    policy: ClusterPolicy
    at: float
    lookups: LookupCache
    max_array_size: int = DEFAULT_MAX_ARRAY_SIZE  # indices an array may have here


def _queue_key(name: str) -> tuple[str, str]:
    return ("queue", name)


def prepare_cached(
    body: SubmissionBody, principal: Principal, context: SubmissionContext
) -> jobs.Prepared | None:
    """The submission checked without the store, or None when that cannot be done: a body
    that is not small JSON, or a queue not in the cache. Bad input raises as it would with the
    store (InvalidInput naming the field)."""
    if not body.small_json:
        return None
    submission = jobs.parse_checked(*body.document())
    if _related(submission):
        return None  # an array or dependencies: checked where the store is read
    name = jobs.queue_of(submission, principal, context.policy)
    queue = context.lookups.peek(_queue_key(name))
    if not isinstance(queue, Queue):
        return None
    return jobs.prepare_parsed(
        submission,
        principal,
        name,
        queue,
        facts=context.facts,
        at=context.at,
        policy=context.policy,
    )


def prepare_with_store(
    body: SubmissionBody,
    principal: Principal,
    context: SubmissionContext,
    sessions: Callable[[], AbstractContextManager[Session]],
) -> jobs.Prepared:
    """The submission checked, its queue read from the cache or else the store (and cached);
    a session connects only when the store is read. Blocking: run it off the event loop."""
    document, plain_json = body.document()
    with sessions() as session:

        def find_queue(name: str) -> Queue | None:
            return context.lookups.get(_queue_key(name), lambda: session.get(Queue, name))

        submission = jobs.parse_checked(document, plain_json)
        queue_name = jobs.queue_of(submission, principal, context.policy)
        prepared = jobs.prepare_parsed(
            submission,
            principal,
            queue_name,
            find_queue(queue_name),
            facts=context.facts,
            at=context.at,
            policy=context.policy,
        )
        if not _related(submission):
            return prepared
        return replace(
            prepared,
            relations=relations_of(session, principal, submission, prepared, context),
        )


def _related(submission: JobSubmission) -> bool:
    spec = submission.manifest.spec
    return spec.array is not None or bool(spec.depends_on)


def relations_of(
    session: Session,
    principal: Principal,
    submission: JobSubmission,
    prepared: jobs.Prepared,
    context: SubmissionContext,
) -> Relations:
    """The submission's array indices (under the server's limit) and its dependencies, each
    on a job or array the caller may see (InvalidInput or NotFound naming the field)."""
    spec = submission.manifest.spec
    indices, parallelism = job_arrays.array_relations(
        spec, submission.source_path, context.max_array_size
    )
    targets = dependencies.resolve_targets(
        session, principal, spec.depends_on, prepared.job.id, submission.source_path
    )
    return Relations(indices, parallelism, tuple(targets))
