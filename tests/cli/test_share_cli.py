"""``kiban share``: members' fair share within their tenant, as a table and as JSON."""

from __future__ import annotations

import json

from cli_support import Run

from kiban.platform import Platform
from kiban.store.models_accounting import MemberUsage


def test_share_lists_members_by_standing(kiban: Run, platform: Platform) -> None:
    now = platform.clock.now()
    with platform.sessions() as session:
        session.add_all(
            [
                MemberUsage(
                    tenant="vision", member="alice", usage=7200.0, raw_usage=7200.0, updated_at=now
                ),
                MemberUsage(
                    tenant="vision", member="bob", usage=3600.0, raw_usage=3600.0, updated_at=now
                ),
                MemberUsage(tenant="vision", member="", usage=0.0, raw_usage=0.0, updated_at=now),
            ]
        )
        session.commit()
    done = kiban("share")
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].split() == [
        "TENANT",
        "MEMBER",
        "WEIGHT",
        "SHARE",
        "RAW",
        "GPU-H",
        "DECAYED",
        "GPU-H",
        "EFFECTIVE",
        "STANDING",
        "RANK",
    ]
    rows = [line.split() for line in lines[1:]]
    assert [(r[1], r[-1]) for r in rows] == [("-", "1"), ("bob", "2"), ("alice", "3")]
    assert rows[2][4:6] == ["2.0", "2.0"]  # alice's raw and decayed GPU-hours

    as_json = kiban("share", "-t", "vision", "-o", "json")
    assert as_json.code == 0, as_json.err
    document = json.loads(as_json.out)
    assert [(m["member"], m["rank"]) for m in document] == [("", 1), ("bob", 2), ("alice", 3)]
    assert document[2]["effective"] == 7200.0 / 10800.0
