"""Job arrays and dependencies as a Job's spec declares them.

``spec.array`` makes one job per index (Slurm's ``--array 0-99%8``): ``indices`` is a list of
ranges (``0-99``, ``1,3,5-7``, ``0-20:5``), ``parallelism`` how many may run at once.
``spec.dependsOn`` makes a job wait until others end as asked (Slurm's ``--dependency``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

DEFAULT_MAX_ARRAY_SIZE = 10_000
"""The most indices an array may have unless the server is told otherwise
(``kiban up --max-array-size``)."""
ARRAY_SIZE_CEILING = 1_000_000
"""The most a manifest may ever ask for: what the spec's shape check allows, whatever the
server's limit (the server then applies its own, ``parse_indices(text, limit)``)."""
ARRAY_INDEX_SEPARATOR = "-"
"""An array index's job id is the array's id, this, and the index: ``train-x7k2p9-7`` (Slurm
writes ``1234_7``; job ids here are DNS labels, the names of pods and Services)."""
_RANGE = re.compile(r"^([0-9]{1,9})(?:-([0-9]{1,9})(?::([0-9]{1,9}))?)?$")


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, frozen=True)


def _ranges(text: str) -> list[range]:
    """The ranges ``text`` lists (ValueError when one is malformed or runs backwards)."""
    ranges = []
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
        ranges.append(range(low, high + 1, stride))
    return ranges


def parse_indices(text: str, limit: int = DEFAULT_MAX_ARRAY_SIZE) -> list[int]:
    """The sorted distinct indices of ``0-99``, ``1,3,5-7`` or ``0-20:5``; ValueError when the
    text is malformed, a range runs backwards, there are none, or more than ``limit``."""
    indices: set[int] = set()
    for span in _ranges(text):
        if len(span) + len(indices) > limit and len(indices.union(span)) > limit:
            raise ValueError(f"more than {limit} indices (this server's limit on an array)")
        indices.update(span)
    if not indices:
        raise ValueError("no indices")
    return sorted(indices)


def check_indices_shape(text: str) -> None:
    """``parse_indices``'s checks of the text, without making the list (a stored index job's
    spec is parsed often): at most ``ARRAY_SIZE_CEILING`` indices counted with repeats."""
    if sum(len(span) for span in _ranges(text)) > ARRAY_SIZE_CEILING:
        raise ValueError(f"more than {ARRAY_SIZE_CEILING} indices")


def array_index_id(array_id: str, index: int) -> str:
    """The job id of an array's index: ``<array id>-<index>``."""
    return f"{array_id}{ARRAY_INDEX_SEPARATOR}{index}"


def is_index_of(job_id: str, array_id: str) -> bool:
    """Whether ``job_id`` is the id of an index of the array ``array_id``."""
    prefix = array_id + ARRAY_INDEX_SEPARATOR
    return job_id.startswith(prefix) and job_id[len(prefix) :].isdigit()


class ArraySpec(_Part):
    """``spec.array``: the indices, and how many of them may run at once (None: no limit)."""

    indices: str = Field(min_length=1, max_length=4096)
    parallelism: int | None = Field(default=None, ge=1, le=ARRAY_SIZE_CEILING)

    @field_validator("indices")
    @classmethod
    def _indices(cls, value: str) -> str:
        check_indices_shape(value)
        return value

    def index_list(self, limit: int = DEFAULT_MAX_ARRAY_SIZE) -> list[int]:
        return parse_indices(self.indices, limit)


class JobGate(StrEnum):
    """Why a pending job is kept from the scheduler (``jobs.gate``; none: it is not)."""

    DEPENDENCY = "Dependency"  # a dependency of it (or of its array) has not held yet
    ARRAY_SLOT = "ArraySlot"  # its array runs as many indices as its parallelism allows
    BUDGET = "Budget"  # a budget of its tenant (or queue) is used up, or its maxRuntime would


class DependencyCondition(StrEnum):
    """How the job depended on must end: Slurm's afterok, afternotok, afterany. ``Failed``
    holds for any end but success (failed or cancelled); over an array, ``Succeeded`` needs
    every index to succeed, ``Failed`` some index not to, once all have ended."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    FINISHED = "Finished"

    @classmethod
    def from_word(cls, word: str) -> DependencyCondition:
        """``ok``, ``notok``, ``any`` (``kiban run --after ID:ok``) or a condition's name."""
        found = _WORDS.get(word.strip().lower())
        if found is None:
            raise ValueError(f"{word!r} is not ok, notok or any")
        return found


_WORDS = {
    "ok": DependencyCondition.SUCCEEDED,
    "notok": DependencyCondition.FAILED,
    "any": DependencyCondition.FINISHED,
    **{c.value.lower(): c for c in DependencyCondition},
}


class Dependency(_Part):
    """One entry of ``spec.dependsOn``: a job (or array) id and the end it must reach."""

    job: str = Field(min_length=1, max_length=128)
    condition: DependencyCondition = DependencyCondition.SUCCEEDED


@dataclass(frozen=True, slots=True)
class DependencyTarget:
    """A dependency checked at submission: what it names (a job, or an array: all its
    indices), how that must end, and its place in ``dependsOn``."""

    id: str
    is_array: bool
    condition: DependencyCondition
    position: int


@dataclass(frozen=True, slots=True)
class Relations:
    """What a checked submission asks beyond one job: the indices of its array (empty: not
    an array) and its parallelism, and its dependencies."""

    indices: tuple[int, ...] = ()
    parallelism: int | None = None
    targets: tuple[DependencyTarget, ...] = ()
