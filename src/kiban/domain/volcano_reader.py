"""What a translation of a Volcano-style manifest gathers on its way besides problems.

The fields it ignores (one warning lists them), notes (a warning each), and the map from kiban
field paths to the fields of the file they came from, so that errors name what the user wrote.
"""

from __future__ import annotations

from typing import Any

from kiban.domain.foreign import ManifestReader


def pretty(items: list[str]) -> str:
    """Names as a message lists them."""
    return ", ".join(items)


class TranslationReader(ManifestReader):
    """One translation's problems, ignored fields, notes and path map."""

    def __init__(self) -> None:
        super().__init__()
        self.ignored: list[str] = []
        self.notes: list[str] = []
        self.paths: list[tuple[str, str]] = []

    def leftovers(
        self, value: dict[str, Any], path: str, known: set[str], ignored: set[str]
    ) -> None:
        """Unknown keys are errors (a misspelling); known ones kiban does not use are warnings."""
        for key in value:
            if key in known:
                continue
            if key in ignored:
                self.ignored.append(f"{path}.{key}")
            else:
                self.problem(f"{path}.{key}", "unknown field (check its spelling)")
