"""The ``kiban`` executable's entry point: it loads the command line, then runs it.

Ctrl-C while the command line's modules load (a few hundred milliseconds, before any command
can catch it) ends ``kiban`` quietly with the shell's code for an interrupt, not a traceback
of whichever import it landed in.
"""

from __future__ import annotations

import sys

from kiban.cli import INTERRUPTED_EXIT


def main() -> None:
    """Load ``kiban.cli.main`` and run it."""
    try:
        from kiban.cli.main import main as run
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED_EXIT)
    run()


if __name__ == "__main__":
    main()
