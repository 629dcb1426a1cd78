"""Choosing jobs by filter for ``kiban cancel``, and asking before acting on several."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

from kiban.domain.errors import SpecError

if TYPE_CHECKING:
    from kiban.sdk.client import Client

ACTIVE_STATES = ("Pending", "Admitted", "Running")
"""What the filters choose from when no ``--state`` is given: jobs that have not ended (nor
are already stopping)."""

ENDED_STATES = frozenset({"succeeded", "failed", "cancelled"})
MAX_JOBS = 1000
"""The most jobs one listing returns (the API's limit)."""


@dataclass(frozen=True)
class FilterChoice:
    """``--queue``, ``--state``, ``--name`` and ``--mine``; all given must match."""

    queue: str | None = None
    states: tuple[str, ...] = ()
    name: str | None = None
    mine: bool = False

    @property
    def any(self) -> bool:
        return bool(self.queue or self.states or self.name or self.mine)

    @property
    def described(self) -> str:
        parts = []
        if self.queue:
            parts.append(f"--queue {self.queue}")
        parts += [f"--state {s}" for s in self.states]
        if self.name:
            parts.append(f"--name {self.name}")
        if self.mine:
            parts.append("--mine")
        return " ".join(parts)


def choose_jobs(api: Client, filters: FilterChoice) -> list[dict[str, Any]]:
    """The jobs the filters choose, newest first (their states in any case)."""
    ended = [s for s in filters.states if s.strip().lower() in ENDED_STATES]
    if ended:
        raise SpecError.single("--state", f"a job that is {ended[0]} has ended already")
    submitted_by = api.whoami()["name"] if filters.mine else None
    return api.jobs(
        state=list(filters.states or ACTIVE_STATES),
        queue=filters.queue,
        name=filters.name,
        submitted_by=submitted_by,
        limit=MAX_JOBS,
    )


def confirm_many(jobs: list[dict[str, Any]], filters: FilterChoice) -> None:
    """Ask on the terminal before cancelling several jobs; without one, refuse (``--yes``)."""
    from kiban.cli import render

    shown = ", ".join(j["id"] for j in jobs[:10]) + (", ..." if len(jobs) > 10 else "")
    what = f"{len(jobs)} jobs match {filters.described}: {shown}"
    if not sys.stdin.isatty():
        render.err.print(f"error: {what}; add --yes to cancel them all", markup=False)
        raise typer.Exit(1)
    if not typer.confirm(f"{what}\nCancel all {len(jobs)}?", err=True):
        render.err.print("nothing cancelled", markup=False)
        raise typer.Exit(1)
