"""What every ``kiban bench`` command does with its options and its run: a refused option on
one line (exit 2), and the report as a table, or one JSON line with ``--json``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer

from kiban.cli import render

if TYPE_CHECKING:
    from rich.console import RenderableType

P = ParamSpec("P")
T = TypeVar("T")


JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="print one JSON object on stdout (the table goes to stderr)"),
]
"""Every benchmark's ``--json``: what ``report`` is given as ``as_json``."""


def bad_option(problem: ValueError) -> NoReturn:
    """A benchmark's options refused: the problem on one line, exit 2 (nothing ran)."""
    render.err.print(f"error: {problem}", markup=False)
    raise typer.Exit(2) from None


def checked(make: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """A benchmark's options made by ``make``; the ValueError it raises refused as
    ``bad_option`` refuses it."""
    try:
        return make(*args, **kwargs)
    except ValueError as exc:
        bad_option(exc)


def report(
    run: Callable[[], dict[str, Any]],
    errors: tuple[type[Exception], ...],
    table: Callable[[dict[str, Any]], RenderableType],
    as_json: bool,
    interrupted: str = "interrupted",
) -> None:
    """What every benchmark does with its run: its errors and Ctrl-C end it with one line; its
    table on stdout, or on stderr with ``--json``, which prints the report as one JSON line."""
    report = render.run_or_exit(run, errors, interrupted)
    render.report_console(as_json).print(table(report))
    if as_json:
        render.json_line(report)


def client_counts(text: str) -> tuple[int, ...]:
    """``--clients 4,16,64`` as (4, 16, 64); a clear error naming the option otherwise."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"--clients must be a number or numbers like 4,16,64; got {text!r}"
        ) from None
    if any(c < 1 for c in counts):
        raise ValueError(f"--clients must be positive; got {text!r}")
    return counts
