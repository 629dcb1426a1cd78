"""``kiban bench``: benchmarks that start their own servers and say on what they ran; those of
the platform as users meet it (``kiban.cli.bench_platform``) and of its parts alone
(``kiban.cli.bench_components``)."""

from __future__ import annotations

import typer

from kiban.cli import render
from kiban.cli.bench_components import component_benches
from kiban.cli.bench_platform import platform_benches

bench_app = typer.Typer(
    rich_markup_mode=render.HELP_MARKUP,
    help="Benchmarks: each starts its own kiban servers and throwaway stores.",
    no_args_is_help=True,
)
bench_app.add_typer(platform_benches)
bench_app.add_typer(component_benches)
