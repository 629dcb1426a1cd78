"""The ``kiban`` command line: a client of the HTTP API like any other."""

from typing import Final

HELP_MARKUP: Final = "markdown"
"""How ``--help`` renders docstrings and help texts: they write code as ``x`` (reST, as every
docstring here), which markdown shows as code and Typer's default rich markup showed with its
backticks."""

INTERRUPTED_EXIT: Final = 130
"""What a shell reports for a command ended by Ctrl-C; kiban exits with it when interrupted."""
