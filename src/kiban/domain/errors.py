"""Errors that carry the path of the offending field, shared by the spec parsers and the API."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FieldProblem:
    """One thing wrong with an input: where (a path like ``spec.tasks[0].replicas``) and what."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


@dataclass
class SpecError(Exception):
    """An input that cannot be accepted; each problem names its field."""

    problems: list[FieldProblem] = field(default_factory=list)

    @classmethod
    def single(cls, field_path: str, message: str) -> SpecError:
        return cls([FieldProblem(field_path, message)])

    def __str__(self) -> str:
        return "; ".join(str(p) for p in self.problems)


def format_location(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic error location as ``spec.tasks[0].replicas``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
