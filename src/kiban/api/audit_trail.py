"""The ASGI middleware that leaves an audit record of every state-changing request.

It sits in front of admission (``kiban.api.admission``), so a request refused there (401, 403,
413, 503) is recorded as one answered by an endpoint is. The caller is the principal admission
left in the request's state (none: the token was missing or not one). The record is queued for
the audit writer when the last part of the answer is ready, and that part is sent only once the
record is committed (``kiban.services.audit.AuditWriter`` group-commits, so concurrent requests
share commits): a client that got its answer knows its record survives a kill -9. Should the
store refuse the record, the request was carried out already, so it is answered all the same;
the refusal is logged and counted (``kiban_audit_append_failures_total``).
Only the action's target is taken from a successful answer (the id of what it created), never
its body: a token's secret is never read into the log. A creation that was refused names its
target too where its endpoint read the name from the request (``name_target``).

A submission's record is written in its job's own transaction instead (``AuditDraft``, handed
to the submission writer by the jobs router): one commit for both, as durable, and a closed-loop
client does not wait for a second commit after its job's. The middleware then writes nothing
more for it; a submission that failed is recorded here as any other request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import Future
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kiban.api.deps import PRINCIPAL_STATE
from kiban.clock import Clock
from kiban.domain.audit import AuditEntry, Operation, is_audited, operation_of, outcome_of
from kiban.platform import Platform

log = logging.getLogger("kiban.audit")

MAX_TARGET_BODY = 64 * 1024
"""An answer read for its target's name is read this far at most (a job's answer is ~1 KiB)."""


def principal_fields(principal: Any) -> tuple[str | None, str | None, str | None]:
    """The member, role and tenant of a principal (``kiban.services.auth.Principal``), read
    tolerantly: a principal without ``member``/``role`` has them derived from its name and
    whether it is an admin or a job's."""
    if principal is None:
        return None, None, None
    member = getattr(principal, "member", None) or getattr(principal, "name", None)
    role = getattr(principal, "role", None)
    if role is None:
        if getattr(principal, "job_id", None) is not None:
            role = "job"
        elif getattr(principal, "is_admin", False):
            role = "admin"
        else:
            role = "member"
    return member, str(role), getattr(principal, "tenant", None)


DRAFT_STATE = "audit_draft"
"""Where an audited request's ``AuditDraft`` is kept in its ASGI state."""


class AuditDraft:
    """An audited request's record before its answer: what an endpoint that writes the record
    in its own transaction needs (``entry``), and whether it did (``written_with``)."""

    def __init__(self, scope: Scope, operation: Operation, clock: Clock) -> None:
        self._scope = scope
        self._operation = operation
        self._clock = clock
        self.written_with: int | None = None
        """The status the record written by the endpoint gives (None: not written)."""
        self.target: str | None = None
        """The target the endpoint read from its request (what a creation names), for an
        answer that names none: a refused creation's record still says what it tried."""

    @property
    def operation(self) -> Operation:
        return self._operation

    def entry(self, status: int, target: str | None) -> AuditEntry:
        """The request's record, as answered with ``status`` about ``target``."""
        return self.entry_at(status, target)

    def entry_at(self, status: int | None, target: str | None) -> AuditEntry:
        """The request's record, as answered with ``status`` (None: not answered)."""
        return entry_of(self._scope, self._operation, status, target, self._clock.now())


def audit_draft(state: Any) -> AuditDraft | None:
    """The request's draft (its ``request.state``), or None when the request is not audited."""
    draft = getattr(state, DRAFT_STATE, None)
    return draft if isinstance(draft, AuditDraft) else None


def name_target(state: Any, target: str) -> None:
    """Name the target of the request's record (its ``request.state``; nothing when the request
    is not audited): for an endpoint whose path does not name it, before it may be refused."""
    draft = audit_draft(state)
    if draft is not None:
        draft.target = target


def entry_of(
    scope: Scope, operation: Operation, status: int | None, target: str | None, at: float
) -> AuditEntry:
    """The record of the request ``scope`` (its caller as admission left it)."""
    member, role, tenant = principal_fields(scope.get("state", {}).get(PRINCIPAL_STATE))
    client = scope.get("client")
    return AuditEntry(
        at=at,
        member=member,
        role=role,
        tenant=tenant,
        source=str(client[0]) if client else None,
        method=scope["method"],
        path=scope["path"],
        action=operation.action,
        target=target[:253] if target else None,
        status=status,
        outcome=outcome_of(status),
    )


class AuditTrail:
    """Records each audited request of ``app`` through ``platform.audit`` (None: auditing is
    off, ``kiban up --no-audit``, and requests pass straight through)."""

    def __init__(self, app: ASGIApp, platform: Platform) -> None:
        self.app = app
        self.platform = platform

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        writer = self.platform.audit
        if (
            writer is None
            or scope["type"] != "http"
            or not is_audited(scope["method"], scope.get("path", ""))
        ):
            await self.app(scope, receive, send)
            return
        operation = operation_of(scope["method"], scope["path"])
        draft = AuditDraft(scope, operation, self.platform.clock)
        scope.setdefault("state", {})[DRAFT_STATE] = draft
        status: int | None = None
        body = bytearray()
        recorded = False

        async def watched(message: Message) -> None:
            nonlocal status, recorded
            if message["type"] == "http.response.start":
                status = int(message["status"])
                if draft.written_with is not None and draft.written_with == status:
                    recorded = True  # the endpoint wrote it with its own change
            elif message["type"] == "http.response.body" and not recorded:
                if _wants_body(operation, status) and len(body) <= MAX_TARGET_BODY:
                    body.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    recorded = True
                    stored = self._record(draft, status, bytes(body))
                    if stored is not None:
                        await _stored(stored, scope)
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            # The draft refers to the scope that holds it: let the request's objects go when
            # it ends (freed at once, not left to the cyclic collector, whose pauses are a tail)
            scope["state"].pop(DRAFT_STATE, None)
            if not recorded:  # no answer, or not all of it: the server failed or the client left
                recorded = True
                self._record(draft, status, b"")

    def _record(self, draft: AuditDraft, status: int | None, body: bytes) -> Future[int] | None:
        """Queue the request's record; its future completes once it is committed. Its target:
        the path's, else the successful answer's, else the one the endpoint named."""
        writer = self.platform.audit
        if writer is None:
            return None
        operation = draft.operation
        target = operation.target
        if target is None and operation.target_key is not None and body:
            target = _answer_key(body, operation.target_key)
        if target is None:
            target = draft.target
        return writer.record(draft.entry_at(status, target))


async def _stored(stored: Future[int], scope: Scope) -> None:
    """Wait, without blocking the event loop, until the record is committed; a refusal is
    logged (and counted by the writer) and the answer goes out regardless."""
    try:
        await asyncio.wrap_future(stored)
    except Exception:
        log.warning(
            "%s %s was answered without its audit record: the store refused it",
            scope["method"],
            scope["path"],
        )


def _wants_body(operation: Operation, status: int | None) -> bool:
    return (
        operation.target is None
        and operation.target_key is not None
        and status is not None
        and 200 <= status < 300
    )


def _answer_key(body: bytes, key: str) -> str | None:
    """``key`` of a JSON object answer, as text (None when it is not one, or lacks it)."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get(key) is None:
        return None
    return str(document[key])
