"""A job submission from the body of a request to a row ready to store.

Submissions are the API's hot path. A small JSON body whose queue is in the lookup cache is
checked at once, with no store connection (``prepare_cached``); any other is checked where the
store may be read (``prepare_with_store``, on a worker thread). Both give the same answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.manifests import load_document
from kiban.services import jobs
from kiban.services.auth import Principal
from kiban.services.errors import invalid
from kiban.services.lookup_cache import LookupCache
from kiban.store.models import Queue

MAX_MANIFEST_BYTES = 1024 * 1024
INLINE_BODY_LIMIT = 64 * 1024
"""Larger manifests are parsed where the store may be read (a worker thread), not inline."""


def parse_manifest_body(raw: bytes, content_type: str) -> dict[str, Any]:
    """The manifest in a request body: JSON, or YAML (which also reads JSON)."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise invalid("", "manifest larger than 1 MiB")
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise invalid("", "the manifest is not UTF-8 text") from None
    try:
        if "json" in content_type:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise invalid(
                    "", f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
                ) from None
            if not isinstance(data, dict):
                raise invalid("", "a manifest must be a JSON object")
            return data
        return load_document(text)
    except RecursionError:
        raise invalid("", "the manifest is nested too deeply") from None


@dataclass(frozen=True)
class SubmissionBody:
    """A submitted manifest as the request carried it."""

    raw: bytes
    content_type: str

    @property
    def small_json(self) -> bool:
        """Whether it is parsed cheaply enough to check on the event loop."""
        return "json" in self.content_type and len(self.raw) <= INLINE_BODY_LIMIT

    def document(self) -> dict[str, Any]:
        return parse_manifest_body(self.raw, self.content_type)


@dataclass(frozen=True)
class SubmissionContext:
    """What a submission is checked against besides its caller: the cluster, the policy in
    force, the time, and the cache of queues."""

    facts: jobs.ClusterFacts
    policy: ClusterPolicy
    at: float
    lookups: LookupCache


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
    submission = jobs.parse_checked(body.document())
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
    document = body.document()
    with sessions() as session:

        def find_queue(name: str) -> Queue | None:
            return context.lookups.get(_queue_key(name), lambda: session.get(Queue, name))

        return jobs.prepare_submission(
            session,
            principal,
            document,
            facts=context.facts,
            at=context.at,
            find_queue=find_queue,
            policy=context.policy,
        )
