"""The ``kiban`` executable's entry point: it loads the command line, then runs it.

Ctrl-C while the command line's modules load (a few hundred milliseconds, before any command
can catch it) ends ``kiban`` quietly with the shell's code for an interrupt, not a traceback
of whichever import it landed in. A command that only reads ends without the interpreter's
teardown (``kiban.cli.quick``); ``kiban.cli.main.main``, which tests call in a process of
their own, exits as Python does.
"""

from __future__ import annotations

import sys

from kiban.cli import INTERRUPTED_EXIT, quick


def main() -> None:
    """Load ``kiban.cli.main``, run it, and end the process."""
    try:
        with quick.loading():
            from kiban.cli.main import ends_at_once
            from kiban.cli.main import main as run
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED_EXIT)
    try:
        run()
    except SystemExit as exc:
        code = exc.code
    else:
        code = None
    quick.end(code, at_once=ends_at_once())


if __name__ == "__main__":
    main()
