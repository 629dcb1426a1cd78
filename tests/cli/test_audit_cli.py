"""``kiban audit``, run in-process against the app: listing, filters, refusals, ``--verify``
on an intact chain and on a tampered one."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from cli_support import Run, one_error_line
from sqlalchemy import text

from kiban.cli.audit import VERIFY_BROKEN_EXIT, since_seconds
from kiban.platform import Platform


def test_audit_lists_changes_and_denials_newest_first(
    kiban: Run, run_as: Callable[[str], Run]
) -> None:
    token = kiban("admin", "create-token", "default", "alice").out.strip()
    assert kiban("cordon", "node-1").code == 0
    alice = run_as(token)
    assert alice("cordon", "node-0").code != 0  # denied, and recorded
    rows = json.loads(kiban("audit", "-o", "json").out)
    assert [(r["member"], r["action"], r["target"], r["outcome"]) for r in rows[:3]] == [
        ("alice", "nodes.cordon", "node-0", "denied"),
        ("admin", "nodes.cordon", "node-1", "succeeded"),
        ("admin", "tokens.create", "default", "succeeded"),
    ]
    assert token not in kiban("audit", "-o", "wide").out
    only = json.loads(kiban("audit", "--principal", "alice", "-o", "json").out)
    assert {r["member"] for r in only} == {"alice"}
    table = kiban("audit").out
    assert "nodes.cordon" in table and "denied" in table
    one_error_line(alice("audit"), "admin")


def test_audit_refuses_bad_options_naming_them(kiban: Run) -> None:
    one_error_line(kiban("audit", "--action", "nodes.explode"), "--action")
    one_error_line(kiban("audit", "--since", "yesterday-ish"), "--since")


def test_verify_says_intact_then_names_the_broken_record(kiban: Run, platform: Platform) -> None:
    for node in ("node-0", "node-1", "node-2"):
        assert kiban("cordon", node).code == 0
    done = kiban("audit", "--verify")
    assert done.code == 0 and "intact" in done.out
    rows = json.loads(kiban("audit", "-o", "json").out)
    victim = rows[1]["seq"]
    with platform.engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("DROP TRIGGER audit_log_append_only ON audit_log"))
        else:
            connection.execute(text("DROP TRIGGER audit_log_no_update"))
        connection.execute(
            text("UPDATE audit_log SET member = 'nobody' WHERE seq = :seq"), {"seq": victim}
        )
    done = kiban("audit", "--verify")
    assert done.code == VERIFY_BROKEN_EXIT
    assert f"broken at record {victim}" in done.err
    verdict = json.loads(kiban("audit", "--verify", "-o", "json").out)
    assert (verdict["intact"], verdict["breakSeq"], verdict["reason"]) == (False, victim, "edited")


def test_since_takes_a_duration_or_a_time() -> None:
    now = datetime(2026, 11, 27, 12, 0, 0)
    assert since_seconds("2h", now) == now.timestamp() - 7200
    assert since_seconds("2026-11-27T09:00", now) == datetime(2026, 11, 27, 9, 0).timestamp()
