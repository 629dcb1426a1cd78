"""Running the CLI in-process against the app: what a command printed and how it exited."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Done:
    code: int
    out: str
    err: str


Run = Callable[..., Done]


def one_error_line(done: Done, *needles: str) -> None:
    """Exit 1, nothing on stdout, one ``error:`` line naming ``needles``, no traceback."""
    assert done.code == 1, done
    assert done.out == ""
    assert "Traceback" not in done.err
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def flat(text: str) -> str:
    """Text as one line: Rich's boxes and line wraps gone (usage errors come in a panel)."""
    return " ".join(text.replace("│", " ").split())
