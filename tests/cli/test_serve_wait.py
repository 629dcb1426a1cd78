"""``kiban serve --wait``: polls the new revision until it is Ready, and says why when not."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.cli import serving
from kiban.sdk.client import ApiError


class Revisions:
    """Answers ``service(name)`` with the next of the given revision states (the last repeats)."""

    def __init__(self, *states: tuple[str, str] | None) -> None:
        self.states = list(states)
        self.calls = 0

    def service(self, name: str) -> dict[str, Any]:
        self.calls += 1
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        revisions = (
            []
            if state is None
            else [{"name": "chat-00002", "state": state[0], "message": state[1]}]
        )
        return {"name": name, "revisions": revisions}


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving.time, "sleep", lambda s: None)


def test_waits_while_loading_and_returns_once_ready() -> None:
    api = Revisions(("Loading", ""), ("Loading", ""), ("Ready", ""))
    assert serving.wait_for_revision(api, "chat", "chat-00002", 60) == "Ready"  # type: ignore[arg-type]
    assert api.calls == 3


def test_a_failed_revision_raises_with_the_loaders_message() -> None:
    api = Revisions(("Loading", ""), ("Failed", "no model files in /models/missing"))
    with pytest.raises(ApiError) as failed:
        serving.wait_for_revision(api, "chat", "chat-00002", 60)  # type: ignore[arg-type]
    assert "chat-00002 failed: no model files in /models/missing" in str(failed.value)


def test_a_revision_replaced_meanwhile_or_too_slow_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ApiError, match="replaced before it was ready"):
        serving.wait_for_revision(Revisions(None), "chat", "chat-00002", 60)  # type: ignore[arg-type]
    clock = iter(float(t) for t in range(0, 1000, 10))
    monkeypatch.setattr(serving.time, "monotonic", lambda: next(clock))
    with pytest.raises(ApiError, match="still Loading after 25s"):
        serving.wait_for_revision(Revisions(("Loading", "")), "chat", "chat-00002", 25)  # type: ignore[arg-type]
