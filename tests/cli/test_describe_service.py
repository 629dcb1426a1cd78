"""``kiban describe service``: the per-replica cap line names a revision whose cap differs."""

from __future__ import annotations

from typing import Any

from kiban.cli.serving import _cap_text


def service(cap: int, *revisions: tuple[str, int, int]) -> dict[str, Any]:
    return {
        "replicaConcurrency": cap,
        "revisions": [
            {"name": name, "trafficPercent": share, "replicaConcurrency": each}
            for name, share, each in revisions
        ],
    }


def test_one_cap_for_every_revision_is_said_once() -> None:
    assert _cap_text(service(16, ("chat-00001", 100, 16))) == ", at most 16 requests at once each"
    assert _cap_text(service(0, ("own-00001", 100, 0))) == ""  # a custom server: no cap


def test_a_canary_with_another_cap_is_named() -> None:
    both = service(4, ("chat-00001", 80, 16), ("chat-00002", 20, 4), ("chat-00003", 0, 2))
    assert _cap_text(both) == ", at most 4 requests at once each (chat-00001: 16)"
    uncapped = service(0, ("chat-00001", 50, 0), ("chat-00002", 50, 8))
    assert _cap_text(uncapped) == ", no cap per replica (chat-00002: 8)"
