"""How a command gives up: one red line on stderr and a non-zero exit."""

from __future__ import annotations

from typing import NoReturn

import typer


def fail(message: str, code: int = 1) -> NoReturn:
    from rich.markup import escape

    from kiban.cli import render

    render.err.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False)
    raise typer.Exit(code)
