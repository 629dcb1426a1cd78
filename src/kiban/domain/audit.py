"""The audit log's values: what a state-changing request was (its action and target), how it
ended, and the hash chain that makes an edited, inserted or deleted record show.

Every request that may change state (any method but GET, HEAD and OPTIONS under ``/api/``, and
the dashboard's sign-in and sign-out) leaves one ``AuditEntry``, refusals and denials included.
Each stored record carries the SHA-256 of the previous record's hash and its own canonical
encoding (``chain_hash``), so changing any field of any record, or removing one, breaks the
chain from there on; ``first_break`` names the first record where it breaks. No body is kept,
of the request or of the answer: a token's secret never reaches the log.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

GENESIS_HASH = "0" * 64
"""The hash the first record is chained to (the chain head of an empty log)."""


class AuditAction(StrEnum):
    """What a request asked for, named after its route (``OTHER``: a path that names no
    operation of the API; the record keeps the path)."""

    JOBS_SUBMIT = "jobs.submit"
    JOBS_CANCEL = "jobs.cancel"
    JOBS_CHECKPOINT = "jobs.checkpoint"
    ARRAYS_CANCEL = "arrays.cancel"
    QUEUES_CREATE = "queues.create"
    TENANTS_CREATE = "tenants.create"
    TOKENS_CREATE = "tokens.create"
    TOKENS_REVOKE = "tokens.revoke"
    TENANTS_DELETE = "tenants.delete"
    QUEUES_DELETE = "queues.delete"
    QUEUES_CHANGE = "queues.change"
    BUDGETS_EXTEND = "budgets.extend"
    POLICY_APPLY = "policy.apply"
    NODES_CORDON = "nodes.cordon"
    NODES_UNCORDON = "nodes.uncordon"
    NODES_HEALTH_REPORT = "nodes.health.report"
    NODES_HEALTH_CHECK = "nodes.health.check"
    HEALTH_SWEEP = "health.sweep"
    SERVICES_APPLY = "services.apply"
    SERVICES_DELETE = "services.delete"
    SERVICES_PROMOTE = "services.promote"
    SERVICES_ROLLBACK = "services.rollback"
    SERVICES_CALL = "services.call"  # the dashboard's playground calling a model
    NOTEBOOKS_START = "notebooks.start"
    NOTEBOOKS_STOP = "notebooks.stop"
    SESSION_SIGN_IN = "session.sign-in"
    SESSION_SIGN_OUT = "session.sign-out"
    OTHER = "other"


class AuditOutcome(StrEnum):
    """How an audited request ended, from its answer's status."""

    SUCCEEDED = "succeeded"  # 2xx, 3xx
    UNAUTHENTICATED = "unauthenticated"  # 401: no token, or not one
    DENIED = "denied"  # 403: the caller may not
    REFUSED = "refused"  # another 4xx: bad input, not found, conflict, busy (429)
    FAILED = "failed"  # 5xx
    ABANDONED = "abandoned"  # no answer was sent (the server failed, or the client left)


def outcome_of(status: int | None) -> AuditOutcome:
    """The outcome of an answer of ``status`` (None: none was sent)."""
    if status is None:
        return AuditOutcome.ABANDONED
    if status < 400:
        return AuditOutcome.SUCCEEDED
    if status == 401:
        return AuditOutcome.UNAUTHENTICATED
    if status == 403:
        return AuditOutcome.DENIED
    if status < 500:
        return AuditOutcome.REFUSED
    return AuditOutcome.FAILED


READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class AuditRoute:
    """One audited operation: its method and path template, its action, and where its target
    is: a path parameter (``target_param``), or a key of a successful answer's JSON
    (``target_key``, for what the request creates). Never an answer that holds a secret."""

    method: str
    template: str
    action: AuditAction
    target_param: str | None = None
    target_key: str | None = None

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compile(self.template)


def _compile(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", template)
    regex = ""
    for part in parts:
        if part.startswith("{") and part.endswith("}"):
            name, _, kind = part[1:-1].partition(":")
            regex += f"(?P<{name}>.+)" if kind == "path" else f"(?P<{name}>[^/]+)"
        else:
            regex += re.escape(part)
    return re.compile(f"^{regex}$")


AUDITED_ROUTES: tuple[AuditRoute, ...] = (
    AuditRoute("POST", "/api/v1/jobs", AuditAction.JOBS_SUBMIT, target_key="id"),
    AuditRoute("POST", "/api/v1/jobs/{job_id}/cancel", AuditAction.JOBS_CANCEL, "job_id"),
    AuditRoute("POST", "/api/v1/jobs/{job_id}/checkpoint", AuditAction.JOBS_CHECKPOINT, "job_id"),
    AuditRoute("POST", "/api/v1/arrays/{array_id}/cancel", AuditAction.ARRAYS_CANCEL, "array_id"),
    AuditRoute("POST", "/api/v1/queues", AuditAction.QUEUES_CREATE, target_key="name"),
    AuditRoute("POST", "/api/v1/tenants", AuditAction.TENANTS_CREATE, target_key="name"),
    # the answer holds the new token: the target is the tenant, never a key of the answer
    AuditRoute("POST", "/api/v1/tenants/{tenant}/tokens", AuditAction.TOKENS_CREATE, "tenant"),
    AuditRoute("DELETE", "/api/v1/tokens/{token_id}", AuditAction.TOKENS_REVOKE, "token_id"),
    AuditRoute("DELETE", "/api/v1/tenants/{tenant}", AuditAction.TENANTS_DELETE, "tenant"),
    AuditRoute("DELETE", "/api/v1/queues/{name}", AuditAction.QUEUES_DELETE, "name"),
    AuditRoute("PATCH", "/api/v1/queues/{name}", AuditAction.QUEUES_CHANGE, "name"),
    AuditRoute(
        "POST", "/api/v1/budgets/extensions", AuditAction.BUDGETS_EXTEND, target_key="budget"
    ),
    AuditRoute("PUT", "/api/v1/policy", AuditAction.POLICY_APPLY, target_key="version"),
    AuditRoute("POST", "/api/v1/nodes/{name}/cordon", AuditAction.NODES_CORDON, "name"),
    AuditRoute("POST", "/api/v1/nodes/{name}/uncordon", AuditAction.NODES_UNCORDON, "name"),
    AuditRoute("POST", "/api/v1/nodes/{name}/health", AuditAction.NODES_HEALTH_REPORT, "name"),
    AuditRoute("POST", "/api/v1/nodes/health", AuditAction.NODES_HEALTH_REPORT),  # a batch
    AuditRoute("POST", "/api/v1/nodes/{name}/health/check", AuditAction.NODES_HEALTH_CHECK, "name"),
    AuditRoute("POST", "/api/v1/health/sweeps", AuditAction.HEALTH_SWEEP),
    AuditRoute("POST", "/api/v1/services", AuditAction.SERVICES_APPLY, target_key="name"),
    AuditRoute("DELETE", "/api/v1/services/{name}", AuditAction.SERVICES_DELETE, "name"),
    AuditRoute("POST", "/api/v1/services/{name}/promote", AuditAction.SERVICES_PROMOTE, "name"),
    AuditRoute("POST", "/api/v1/services/{name}/rollback", AuditAction.SERVICES_ROLLBACK, "name"),
    AuditRoute(
        "POST", "/api/v1/services/{name}/openai/{path:path}", AuditAction.SERVICES_CALL, "name"
    ),
    AuditRoute("POST", "/api/v1/notebooks", AuditAction.NOTEBOOKS_START, target_key="name"),
    AuditRoute("POST", "/api/v1/notebooks/{name}/stop", AuditAction.NOTEBOOKS_STOP, "name"),
    AuditRoute("POST", "/web/session", AuditAction.SESSION_SIGN_IN, target_key="name"),
    AuditRoute("DELETE", "/web/session", AuditAction.SESSION_SIGN_OUT),
)

_BY_METHOD: dict[str, tuple[tuple[re.Pattern[str], AuditRoute], ...]] = {}
for _route in AUDITED_ROUTES:
    _BY_METHOD[_route.method] = (*_BY_METHOD.get(_route.method, ()), (_route.pattern, _route))


def is_audited(method: str, path: str) -> bool:
    """Whether a request leaves a record: any change under ``/api/``, and the dashboard's
    session (JupyterLab's own traffic under ``/nb/`` is the notebook's, not kiban's)."""
    if method in READ_METHODS:
        return False
    return path.startswith("/api/") or path == "/web/session"


@dataclass(frozen=True, slots=True)
class Operation:
    """What one request was: its action, its target when the path names it, and the key of
    the answer that names it otherwise."""

    action: AuditAction
    target: str | None
    target_key: str | None


def operation_of(method: str, path: str) -> Operation:
    """The operation a request's method and path name (``OTHER`` for none)."""
    for pattern, route in _BY_METHOD.get(method, ()):
        match = pattern.match(path)
        if match is None:
            continue
        target = match.group(route.target_param) if route.target_param else None
        return Operation(route.action, target, route.target_key)
    return Operation(AuditAction.OTHER, None, None)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audited request, before it has a place in the chain. ``member``: the caller's
    member name (None when no token was accepted); ``source``: the client's address."""

    at: float
    member: str | None
    role: str | None
    tenant: str | None
    source: str | None
    method: str
    path: str
    action: AuditAction
    target: str | None
    status: int | None
    outcome: AuditOutcome


@dataclass(frozen=True, slots=True)
class ChainedEntry:
    """An entry in the chain: its sequence number (1, 2, ...), the hash it follows, its own."""

    seq: int
    entry: AuditEntry
    prev_hash: str
    hash: str


_CANONICAL_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)
"""Made once: ``json.dumps`` with these options builds an encoder on every call."""


def canonical(seq: int, entry: AuditEntry) -> bytes:
    """The bytes a record's hash covers: every field, in a fixed order, as compact JSON
    (floats in Python's shortest round-trip form, which both stores give back exactly)."""
    fields = [
        seq,
        entry.at,
        entry.member,
        entry.role,
        entry.tenant,
        entry.source,
        entry.method,
        entry.path,
        str(entry.action),
        entry.target,
        entry.status,
        str(entry.outcome),
    ]
    return _CANONICAL_JSON.encode(fields).encode()


def chain_hash(prev_hash: str, seq: int, entry: AuditEntry) -> str:
    """SHA-256 over the previous record's hash and this record's canonical encoding."""
    digest = hashlib.sha256(prev_hash.encode("ascii"))
    digest.update(b"\n")
    digest.update(canonical(seq, entry))
    return digest.hexdigest()


def chain(prev_hash: str, last_seq: int, entries: Iterable[AuditEntry]) -> list[ChainedEntry]:
    """``entries`` appended after the record ``last_seq`` whose hash is ``prev_hash``."""
    chained: list[ChainedEntry] = []
    for entry in entries:
        last_seq += 1
        own = chain_hash(prev_hash, last_seq, entry)
        chained.append(ChainedEntry(last_seq, entry, prev_hash, own))
        prev_hash = own
    return chained


class ChainBreak(StrEnum):
    """Why the chain does not hold at a record."""

    EDITED = "edited"  # its fields do not give its stored hash
    RELINKED = "relinked"  # it does not follow the hash of the record before it
    MISSING = "missing"  # records before it were removed (its number skips)
    TRUNCATED = "truncated"  # the chain head names records that are no longer there
    HEAD_MISMATCH = "head-mismatch"  # the chain head does not name the last record
    ANCHOR_GONE = "anchor-gone"  # the anchored record is no longer in the log (cut off the end)
    ANCHOR_CHANGED = "anchor-changed"  # the anchored record's hash is not the one kept


ANCHOR_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class ChainAnchor:
    """A record's number and hash kept outside the store (a file, a ticket): a later walk of
    the chain must reach that record and find that hash there. The chain head alone cannot
    show records cut off the end when whoever cut them rewrote the head too; an anchor can."""

    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.seq}:{self.hash}"


def parse_anchor(text: str) -> ChainAnchor:
    """``SEQ:HASH`` (as ``str(anchor)`` writes it) as an anchor; ValueError saying what is
    wrong with it otherwise."""
    seq_text, colon, hash_text = text.strip().partition(":")
    if not colon:
        raise ValueError(f"{text!r} is not SEQ:HASH (a record number, a colon, its hash)")
    try:
        seq = int(seq_text)
    except ValueError:
        raise ValueError(f"{seq_text!r} is not a record number") from None
    if seq < 0:
        raise ValueError(f"the record number must be 0 or more, not {seq}")
    hash_ = hash_text.strip().lower()
    if ANCHOR_HASH.fullmatch(hash_) is None:
        raise ValueError(f"{hash_text!r} is not a SHA-256 hash (64 hexadecimal digits)")
    return ChainAnchor(seq, hash_)


@dataclass(frozen=True, slots=True)
class Verification:
    """The answer of ``ChainWalk``: how many records were checked, and the first break."""

    records: int
    break_seq: int | None = None
    reason: ChainBreak | None = None
    message: str = ""

    @property
    def intact(self) -> bool:
        return self.reason is None


class ChainWalk:
    """Checks records in order, a page at a time (the log may be long): ``feed`` each page,
    then ``finish`` with the chain head. Stops at the first break. With an ``anchor``, the
    walk must also reach the anchored record and find its hash there."""

    def __init__(self, anchor: ChainAnchor | None = None) -> None:
        self.records = 0
        self.last_seq = 0
        self.last_hash = GENESIS_HASH
        self.broken: Verification | None = None
        self.anchor = anchor

    def feed(self, records: Iterable[ChainedEntry]) -> bool:
        """Check the next records; False once the chain is broken (stop reading)."""
        if self.broken is not None:
            return False
        for record in records:
            self.records += 1
            if record.seq != self.last_seq + 1:
                self.broken = Verification(
                    self.records,
                    record.seq,
                    ChainBreak.MISSING,
                    f"record {record.seq} follows record {self.last_seq}: "
                    f"{record.seq - self.last_seq - 1} record(s) before it were removed",
                )
                return False
            if chain_hash(record.prev_hash, record.seq, record.entry) != record.hash:
                self.broken = Verification(
                    self.records,
                    record.seq,
                    ChainBreak.EDITED,
                    f"record {record.seq} was changed: its fields do not give its hash",
                )
                return False
            if record.prev_hash != self.last_hash:
                self.broken = Verification(
                    self.records,
                    record.seq,
                    ChainBreak.RELINKED,
                    f"record {record.seq} does not follow record {self.last_seq}'s hash: "
                    "it, or a record before it, was replaced",
                )
                return False
            anchor = self.anchor
            if anchor is not None and record.seq == anchor.seq and record.hash != anchor.hash:
                self.broken = self._anchor_changed(record.hash)
                return False
            self.last_seq = record.seq
            self.last_hash = record.hash
        return True

    def _anchor_changed(self, found: str) -> Verification:
        assert self.anchor is not None
        return Verification(
            self.records,
            self.anchor.seq,
            ChainBreak.ANCHOR_CHANGED,
            f"record {self.anchor.seq} has hash {found[:12]}..., not the anchored "
            f"{self.anchor.hash[:12]}...: it and the records after it were rewritten",
        )

    def finish(self, head_seq: int, head_hash: str) -> Verification:
        """The verdict, given the chain head (the last record's number and hash, kept apart)."""
        if self.broken is not None:
            return self.broken
        if head_seq > self.last_seq:
            return Verification(
                self.records,
                self.last_seq + 1,
                ChainBreak.TRUNCATED,
                f"records {self.last_seq + 1} to {head_seq} were removed from the end",
            )
        if head_seq != self.last_seq or head_hash != self.last_hash:
            return Verification(
                self.records,
                self.last_seq,
                ChainBreak.HEAD_MISMATCH,
                f"the chain head names record {head_seq}, the log ends at {self.last_seq}",
            )
        anchor = self.anchor
        if anchor is not None and anchor.seq > self.last_seq:
            return Verification(
                self.records,
                anchor.seq,
                ChainBreak.ANCHOR_GONE,
                f"the anchored record {anchor.seq} is gone: the log ends at {self.last_seq} "
                "(records were removed from the end and the chain head rewritten)",
            )
        if anchor is not None and anchor.seq == 0 and anchor.hash != GENESIS_HASH:
            return self._anchor_changed(GENESIS_HASH)
        return Verification(self.records)
