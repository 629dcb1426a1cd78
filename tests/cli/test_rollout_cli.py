"""``kiban rollback`` and ``kiban promote`` say what changed, as people read it: which revision
was dropped, promoted or brought back, and the traffic before and after (never a Python dict)."""

from __future__ import annotations

from typing import Any

from cli_support import Run
from sqlalchemy import select

from kiban.cli.serving import promote_lines, rollback_lines
from kiban.platform import Platform
from kiban.services import serving
from kiban.services.auth import Principal
from kiban.store.models_serving import ServiceRow

ADMIN = Principal(name="admin", tenant=None, is_admin=True)


def revision(name: str, role: str, share: int) -> dict[str, Any]:
    return {"name": name, "role": role, "trafficPercent": share}


def service(traffic: dict[str, int], *revisions: dict[str, Any]) -> dict[str, Any]:
    return {"name": "chat", "traffic": traffic, "revisions": list(revisions)}


SPLIT = service(
    {"chat-00001": 50, "chat-00002": 50},
    revision("chat-00001", "stable", 50),
    revision("chat-00002", "canary", 50),
)


def test_rolling_back_a_canary_names_it_and_the_traffic_before_and_after() -> None:
    after = service(
        {"chat-00001": 100}, revision("chat-00001", "stable", 100), revision("chat-00002", "", 0)
    )
    assert rollback_lines(SPLIT, after) == [
        "service chat rolled back: canary chat-00002 dropped and retired",
        "traffic: chat-00001 100% (was chat-00001 50%, chat-00002 50%)",
    ]


def test_rolling_back_with_no_canary_brings_the_earlier_revision_back() -> None:
    before = service(
        {"chat-00002": 100}, revision("chat-00001", "", 0), revision("chat-00002", "stable", 100)
    )
    after = service(
        {"chat-00002": 100},
        revision("chat-00001", "canary", 0),
        revision("chat-00002", "stable", 100),
    )
    assert rollback_lines(before, after) == [
        "service chat rolled back: revision chat-00001 comes back and takes all traffic once it "
        "is ready",
        "traffic: chat-00002 100% (until it is ready)",
    ]


def test_promoting_names_the_new_stable_and_the_retired_one() -> None:
    after = service(
        {"chat-00002": 100}, revision("chat-00001", "", 0), revision("chat-00002", "stable", 100)
    )
    assert promote_lines(SPLIT, after) == [
        "service chat: chat-00002 takes all traffic; chat-00001 retired",
        "traffic: chat-00002 100% (was chat-00001 50%, chat-00002 50%)",
    ]


def chat(model: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": "chat"},
        "spec": {"model": {"name": "tiny", "storageUri": f"file:///models/{model}"}, **spec},
    }


def test_kiban_rollback_prints_lines_not_a_dict(kiban: Run, platform: Platform) -> None:
    with platform.sessions() as session:
        serving.apply(session, ADMIN, chat("v1"), facts=platform.facts, at=0.0)
        row = session.scalars(select(ServiceRow)).one()
        row.stable_revision, row.canary_revision, row.canary_percent = 1, None, 0
        serving.apply(
            session, ADMIN, chat("v2", canaryTrafficPercent=20), facts=platform.facts, at=1.0
        )
        session.commit()
    done = kiban("rollback", "chat")
    assert (done.code, done.out) == (0, ""), done.err
    lines = done.err.splitlines()
    assert lines[0] == "service chat rolled back: canary chat-00002 dropped and retired"
    assert lines[1].startswith("traffic: ")
    assert "{" not in done.err
