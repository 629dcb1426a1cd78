"""A quick start and end for the ``kiban`` process (``kiban bench cli`` measures both).

Two costs of every call that are Python's, not the command's:

- The garbage collector runs while modules load (every few hundred allocations), and finds
  nothing: what a module creates lives as long as the module. ``loading()`` pauses it around
  the CLI's imports (Typer, the command's module, the HTTP client, Rich); it runs as usual
  otherwise, so a long command (``kiban up``, ``--watch``) collects as before.
- At exit, the interpreter tears every module down, object by object: for the ~340 modules of
  ``kiban ls``, a sixth of its CPU time. A command that only asks the API and prints ends at
  once instead (``end``): its output flushed and its ``atexit`` handlers run, then
  ``os._exit`` with its exit code (mypy ends its command line the same way). Any other thread
  still running, or output that cannot be flushed, and it ends as Python does.

And one wait put to use: ``warm_up`` imports modules in a background thread while the command
waits for the server (``kiban.cli.connection`` warms Rich's console so), and ``warmed`` waits
for that thread before the command imports any of them itself.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import threading

_warm_ups: list[threading.Thread] = []


@contextmanager
def loading() -> Iterator[None]:
    """Garbage collection paused while the block runs (modules load), as it was after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def warm_up(modules: tuple[str, ...]) -> None:
    """Import ``modules`` in a background thread, with the collector paused as in
    ``loading``: call it when this thread is about to wait (for the server's answer), and
    ``warmed`` before this thread imports any of the same modules. A module that fails to
    import is left for this thread to import, and report, itself."""
    import threading

    def run() -> None:
        with loading():
            for name in modules:
                try:
                    __import__(name)
                except Exception:  # the command's own import says what is wrong
                    return

    thread = threading.Thread(target=run, name="kiban-warm-up", daemon=True)
    _warm_ups.append(thread)
    thread.start()


def warmed() -> None:
    """Wait for the warm-ups started to finish."""
    while _warm_ups:
        _warm_ups.pop().join()


def end(code: object, at_once: bool) -> NoReturn:
    """Exit with ``code`` (``sys.exit``'s argument); ``at_once``: without the interpreter's
    teardown, where nothing needs it."""
    if at_once and (code is None or isinstance(code, int)) and _only_thread() and _flushed():
        import atexit

        atexit._run_exitfuncs()
        if _flushed():  # what the handlers wrote
            os._exit(code or 0)
    sys.exit(code)  # type: ignore[arg-type]


def _only_thread() -> bool:
    """Whether no other thread would keep the process alive (Python waits for those)."""
    threading = sys.modules.get("threading")
    if threading is None:
        return True
    main = threading.main_thread()
    return all(t is main or t.daemon for t in threading.enumerate())


def _flushed() -> bool:
    """Whether stdout and stderr took all their buffered output; if not (a closed pipe), the
    interpreter's own exit reports it as it always has."""
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return False
    return True
