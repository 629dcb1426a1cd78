"""The audit log's pure parts: actions and targets from routes, outcomes from statuses, and a
hash chain in which an edited, relinked, removed or cut-off record shows."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from kiban.domain.audit import (
    GENESIS_HASH,
    AuditAction,
    AuditEntry,
    AuditOutcome,
    ChainAnchor,
    ChainBreak,
    ChainedEntry,
    ChainWalk,
    Verification,
    chain,
    chain_hash,
    is_audited,
    operation_of,
    outcome_of,
    parse_anchor,
)


def entry(n: int, **changes: object) -> AuditEntry:
    base = AuditEntry(
        at=1_700_000_000.0 + n / 3,
        member="alice",
        role="member",
        tenant="vision",
        source="10.0.0.7",
        method="POST",
        path=f"/api/v1/jobs/train-{n}/cancel",
        action=AuditAction.JOBS_CANCEL,
        target=f"train-{n}",
        status=200,
        outcome=AuditOutcome.SUCCEEDED,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def walk(
    records: list[ChainedEntry],
    head: tuple[int, str] | None = None,
    anchor: ChainAnchor | None = None,
) -> Verification:
    checker = ChainWalk(anchor)
    checker.feed(records[:2])  # in pages, as the store reads them
    checker.feed(records[2:])
    if head is None:
        head = (records[-1].seq, records[-1].hash) if records else (0, GENESIS_HASH)
    return checker.finish(*head)


def log_of(count: int) -> list[ChainedEntry]:
    return chain(GENESIS_HASH, 0, [entry(n) for n in range(count)])


def test_an_untouched_chain_is_intact_and_numbered_from_one() -> None:
    records = log_of(5)
    assert [r.seq for r in records] == [1, 2, 3, 4, 5]
    assert records[0].prev_hash == GENESIS_HASH
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(records))
    verdict = walk(records)
    assert verdict.intact and verdict.records == 5


def test_appending_later_continues_the_same_chain() -> None:
    first = log_of(3)
    more = chain(first[-1].hash, first[-1].seq, [entry(7), entry(8)])
    assert walk(first + more).intact


@pytest.mark.parametrize(
    "change",
    [
        {"member": "mallory"},
        {"outcome": AuditOutcome.DENIED},
        {"status": 403},
        {"at": 1_700_000_000.0 + 2 / 3 + 1e-6},
        {"target": None},
        {"source": "10.0.0.8"},
        {"tenant": None},
    ],
    ids=["member", "outcome", "status", "time", "target", "source", "tenant"],
)
def test_an_edited_field_is_named_at_its_record(change: dict[str, object]) -> None:
    records = log_of(5)
    records[2] = dataclasses.replace(
        records[2], entry=dataclasses.replace(records[2].entry, **change)
    )  # type: ignore[arg-type]
    verdict = walk(records)
    assert (verdict.break_seq, verdict.reason) == (3, ChainBreak.EDITED)
    assert "record 3" in verdict.message


def test_a_record_rewritten_with_a_fresh_hash_breaks_the_link_after_it() -> None:
    records = log_of(5)
    forged_entry = dataclasses.replace(records[2].entry, member="mallory")
    forged_hash = chain_hash(records[2].prev_hash, 3, forged_entry)
    records[2] = ChainedEntry(3, forged_entry, records[2].prev_hash, forged_hash)
    verdict = walk(records)
    assert (verdict.break_seq, verdict.reason) == (4, ChainBreak.RELINKED)


def test_a_removed_record_is_named() -> None:
    records = log_of(5)
    del records[1]
    verdict = walk(records)
    assert (verdict.break_seq, verdict.reason) == (3, ChainBreak.MISSING)
    assert "1 record(s) before it were removed" in verdict.message


def test_removed_first_records_are_named() -> None:
    verdict = walk(log_of(5)[2:])
    assert (verdict.break_seq, verdict.reason) == (3, ChainBreak.MISSING)


def test_records_cut_off_the_end_show_against_the_chain_head() -> None:
    records = log_of(5)
    head = (records[-1].seq, records[-1].hash)
    verdict = walk(records[:3], head)
    assert (verdict.break_seq, verdict.reason) == (4, ChainBreak.TRUNCATED)


def test_a_head_that_names_another_record_shows() -> None:
    records = log_of(3)
    verdict = walk(records, (3, GENESIS_HASH))
    assert verdict.reason is ChainBreak.HEAD_MISMATCH


def test_an_empty_log_is_intact() -> None:
    assert walk([]).intact


def anchor_at(records: list[ChainedEntry], seq: int) -> ChainAnchor:
    return ChainAnchor(seq, records[seq - 1].hash)


def test_an_anchored_record_still_there_keeps_the_chain_intact() -> None:
    records = log_of(6)
    for seq in (1, 4, 6):
        assert walk(records, anchor=anchor_at(records, seq)).intact
    assert walk(records, anchor=ChainAnchor(0, GENESIS_HASH)).intact


def test_records_cut_off_the_end_with_the_head_rewritten_show_only_against_an_anchor() -> None:
    """Whoever removes the newest records and moves the chain head back leaves a chain that
    holds together; the anchor kept outside the store names the record that went."""
    records = log_of(6)
    anchor = anchor_at(records, 5)
    cut = records[:3]
    head = (cut[-1].seq, cut[-1].hash)  # the head rewritten to the new last record
    assert walk(cut, head).intact
    verdict = walk(cut, head, anchor)
    assert (verdict.intact, verdict.break_seq, verdict.reason) == (
        False,
        5,
        ChainBreak.ANCHOR_GONE,
    )
    assert "the log ends at 3" in verdict.message


def test_a_chain_rewritten_from_the_anchored_record_on_shows_against_the_anchor() -> None:
    """A record edited and every hash from it on recomputed (the head too) holds together;
    the anchored record's hash is no longer the one kept."""
    records = log_of(6)
    anchor = anchor_at(records, 4)
    forged = records[:2] + chain(
        records[1].hash, 2, [entry(2, member="mallory")] + [r.entry for r in records[3:]]
    )
    assert walk(forged).intact
    verdict = walk(forged, anchor=anchor)
    assert (verdict.break_seq, verdict.reason) == (4, ChainBreak.ANCHOR_CHANGED)
    edited = [*records[:4], dataclasses.replace(records[4], entry=entry(99)), *records[5:]]
    assert walk(edited, anchor=anchor).reason is ChainBreak.EDITED  # as before
    assert walk([], anchor=ChainAnchor(0, "a" * 64)).reason is ChainBreak.ANCHOR_CHANGED


def test_parse_anchor() -> None:
    hash_ = "ab" * 32
    assert parse_anchor(f" 12:{hash_.upper()}\n") == ChainAnchor(12, hash_)
    assert str(ChainAnchor(12, hash_)) == f"12:{hash_}"
    for bad, says in (
        ("12", "not SEQ:HASH"),
        (f"x:{hash_}", "not a record number"),
        (f"-1:{hash_}", "0 or more"),
        ("12:abc", "not a SHA-256 hash"),
    ):
        with pytest.raises(ValueError, match=says):
            parse_anchor(bad)


def test_the_hash_depends_on_the_record_before() -> None:
    assert chain_hash(GENESIS_HASH, 1, entry(1)) != chain_hash("f" * 64, 1, entry(1))
    assert chain_hash(GENESIS_HASH, 1, entry(1)) != chain_hash(GENESIS_HASH, 2, entry(1))


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, AuditOutcome.SUCCEEDED),
        (201, AuditOutcome.SUCCEEDED),
        (307, AuditOutcome.SUCCEEDED),
        (400, AuditOutcome.REFUSED),
        (401, AuditOutcome.UNAUTHENTICATED),
        (403, AuditOutcome.DENIED),
        (404, AuditOutcome.REFUSED),
        (409, AuditOutcome.REFUSED),
        (413, AuditOutcome.REFUSED),
        (422, AuditOutcome.REFUSED),
        (500, AuditOutcome.FAILED),
        (503, AuditOutcome.FAILED),
        (None, AuditOutcome.ABANDONED),
    ],
)
def test_outcome_of_status(status: int | None, outcome: AuditOutcome) -> None:
    assert outcome_of(status) is outcome


@pytest.mark.parametrize(
    ("method", "path", "action", "target", "key"),
    [
        ("POST", "/api/v1/jobs", AuditAction.JOBS_SUBMIT, None, "id"),
        ("POST", "/api/v1/jobs/train-x1/cancel", AuditAction.JOBS_CANCEL, "train-x1", None),
        ("POST", "/api/v1/jobs/a/checkpoint", AuditAction.JOBS_CHECKPOINT, "a", None),
        ("POST", "/api/v1/tenants/vision/tokens", AuditAction.TOKENS_CREATE, "vision", None),
        ("PUT", "/api/v1/policy", AuditAction.POLICY_APPLY, None, "version"),
        ("POST", "/api/v1/nodes/n-1/health/check", AuditAction.NODES_HEALTH_CHECK, "n-1", None),
        ("POST", "/api/v1/nodes/n-1/health", AuditAction.NODES_HEALTH_REPORT, "n-1", None),
        ("DELETE", "/api/v1/services/llm", AuditAction.SERVICES_DELETE, "llm", None),
        (
            "POST",
            "/api/v1/services/llm/openai/v1/chat/completions",
            AuditAction.SERVICES_CALL,
            "llm",
            None,
        ),
        ("POST", "/web/session", AuditAction.SESSION_SIGN_IN, None, "name"),
        ("POST", "/api/v1/nowhere", AuditAction.OTHER, None, None),
        ("PATCH", "/api/v1/jobs", AuditAction.OTHER, None, None),
    ],
)
def test_operation_of_route(
    method: str, path: str, action: AuditAction, target: str | None, key: str | None
) -> None:
    operation = operation_of(method, path)
    assert (operation.action, operation.target, operation.target_key) == (action, target, key)


@pytest.mark.parametrize(
    ("method", "path", "audited"),
    [
        ("POST", "/api/v1/jobs", True),
        ("DELETE", "/api/v1/services/x", True),
        ("PATCH", "/api/v1/anything", True),
        ("GET", "/api/v1/jobs", False),
        ("HEAD", "/api/v1/jobs", False),
        ("OPTIONS", "/api/v1/jobs", False),
        ("POST", "/web/session", True),
        ("DELETE", "/web/session", True),
        ("POST", "/nb/vision/lab/api/kernels", False),  # JupyterLab's own traffic
        ("POST", "/assets/x", False),
    ],
)
def test_which_requests_are_audited(method: str, path: str, audited: bool) -> None:
    assert is_audited(method, path) is audited
