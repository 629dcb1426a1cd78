"""Job arrays and dependencies as a Job's spec declares them.

``spec.array`` makes one job per index (Slurm's ``--array 0-99%8``): ``indices`` is a list of
ranges (``0-99``, ``1,3,5-7``, ``0-20:5``), ``parallelism`` how many may run at once.
``spec.dependsOn`` makes a job wait until others end as asked (Slurm's ``--dependency``).
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

DEFAULT_MAX_ARRAY_SIZE = 10_000
_RANGE = re.compile(r"^([0-9]{1,9})(?:-([0-9]{1,9})(?::([0-9]{1,9}))?)?$")


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, frozen=True)


def parse_indices(text: str, limit: int = DEFAULT_MAX_ARRAY_SIZE) -> list[int]:
    """The sorted distinct indices of ``0-99``, ``1,3,5-7`` or ``0-20:5``; ValueError when the
    text is malformed, a range runs backwards, there are none, or more than ``limit``."""
    indices: set[int] = set()
    for part in text.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise ValueError(
                f"{part.strip()!r} is not an index range (examples: 0-99, 1,3,5-7, 0-20:5)"
            )
        first, last, step = match.groups()
        low = int(first)
        high = low if last is None else int(last)
        stride = 1 if step is None else int(step)
        if high < low:
            raise ValueError(f"range {part.strip()!r} ends before it starts")
        if stride < 1:
            raise ValueError(f"range {part.strip()!r} has a step below 1")
        if (high - low) // stride + 1 + len(indices) > limit:
            raise ValueError(f"more than {limit} indices (the array limit)")
        indices.update(range(low, high + 1, stride))
    if not indices:
        raise ValueError("no indices")
    return sorted(indices)


class ArraySpec(_Part):
    """``spec.array``: the indices, and how many of them may run at once (None: no limit)."""

    indices: str = Field(min_length=1, max_length=4096)
    parallelism: int | None = Field(default=None, ge=1, le=DEFAULT_MAX_ARRAY_SIZE)

    @field_validator("indices")
    @classmethod
    def _indices(cls, value: str) -> str:
        parse_indices(value)
        return value

    def index_list(self, limit: int = DEFAULT_MAX_ARRAY_SIZE) -> list[int]:
        return parse_indices(self.indices, limit)


class DependencyCondition(StrEnum):
    """How the job depended on must end: Slurm's afterok, afternotok, afterany."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    FINISHED = "Finished"


class Dependency(_Part):
    """One entry of ``spec.dependsOn``: a job (or array) id and the end it must reach."""

    job: str = Field(min_length=1, max_length=128)
    condition: DependencyCondition = DependencyCondition.SUCCEEDED
