"""Reading a foreign manifest (Volcano's Job, KServe's InferenceService) field by field.

Every problem is collected at its path instead of stopping at the first, so a user fixes a
file in one go; pydantic's messages are put in kiban's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiban.domain.errors import FieldProblem


def validation_message(error: Mapping[str, Any]) -> str:
    """One of pydantic's errors as kiban says it."""
    if error["type"] == "extra_forbidden":
        return "unknown field (check its spelling)"
    if error["type"] == "missing":
        return "required field is missing"
    return str(error["msg"]).removeprefix("Value error, ")


class ManifestReader:
    """Collects the problems of one document; reads mappings and lists without trusting them."""

    def __init__(self) -> None:
        self.problems: list[FieldProblem] = []

    def problem(self, path: str, message: str) -> None:
        self.problems.append(FieldProblem(path, message))

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        """``value`` if it is a mapping; {} (and a problem unless it is absent) otherwise."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(path, "must be a mapping")
            return {}
        return value

    def items(self, value: Any, path: str) -> list[Any]:
        """``value`` if it is a list; [] (and a problem unless it is absent) otherwise."""
        if value is None:
            return []
        if not isinstance(value, list):
            self.problem(path, "must be a list")
            return []
        return value
