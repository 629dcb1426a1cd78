"""``kiban audit``, run in-process against the app: listing, filters, refusals, ``--verify``
on an intact chain and on a tampered one, and ``anchor`` / ``verify --anchor``: records cut
off the end, with the chain head rewritten, show against an anchor kept in a file."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

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


def cut_off_the_end(platform: Platform, keep: int) -> None:
    """Remove every record after ``keep`` and move the chain head back to it, as someone with
    the database owner's rights can (the triggers dropped first)."""
    with platform.engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("DROP TRIGGER audit_log_append_only ON audit_log"))
        else:
            connection.execute(text("DROP TRIGGER audit_log_no_delete"))
        connection.execute(text("DELETE FROM audit_log WHERE seq > :seq"), {"seq": keep})
        connection.execute(
            text(
                "UPDATE audit_chain_head SET seq = :seq, "
                "hash = (SELECT hash FROM audit_log WHERE seq = :seq) WHERE id = 1"
            ),
            {"seq": keep},
        )


def test_an_anchor_kept_in_a_file_shows_records_cut_off_the_end(
    kiban: Run, platform: Platform, tmp_path: Path
) -> None:
    for node in ("node-0", "node-1", "node-2"):
        assert kiban("cordon", node).code == 0
    printed = kiban("audit", "anchor")
    assert printed.code == 0
    seq, _, hash_ = printed.out.strip().partition(":")
    newest = json.loads(kiban("audit", "-o", "json").out)[0]
    assert (int(seq), hash_) == (newest["seq"], newest["hash"])
    kept = tmp_path / "anchor.txt"
    kept.write_text(printed.out)
    as_json = tmp_path / "anchor.json"
    as_json.write_text(kiban("audit", "anchor", "-o", "json").out)
    assert kiban("uncordon", "node-0").code == 0
    for anchor in (str(kept), str(as_json), printed.out.strip()):
        done = kiban("audit", "verify", "--anchor", anchor)
        assert done.code == 0 and "holds the anchored record" in done.out, done

    cut_off_the_end(platform, int(seq) - 2)
    assert kiban("audit", "verify").code == 0  # the chain alone holds together
    done = kiban("audit", "verify", "--anchor", str(kept))
    assert done.code == VERIFY_BROKEN_EXIT
    assert f"broken at record {seq}" in done.err and "anchored record" in done.err


def test_a_bad_anchor_is_refused_naming_it(kiban: Run, tmp_path: Path) -> None:
    one_error_line(kiban("audit", "verify", "--anchor", "12:nothex"), "--anchor", "SHA-256")
    one_error_line(kiban("audit", "verify", "--anchor", str(tmp_path / "none")), "--anchor")
    junk = tmp_path / "junk.json"
    junk.write_text('{"seq": 3}')
    one_error_line(kiban("audit", "verify", "--anchor", str(junk)), "--anchor", "JSON anchor")
    one_error_line(kiban("audit", "--anchor", "1:" + "a" * 64), "--anchor goes with verify")
