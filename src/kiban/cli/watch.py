"""``--watch``: show something again each time it changes, until Ctrl-C (exit 0).

On a terminal the table is redrawn in place every poll (ages tick); piped (or on a dumb
terminal), a new table is printed only when the data changed, and ``-o json`` prints one JSON
object per line per change (``-o yaml``: one ``---`` document per change), for scripts that
follow a job.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kiban.cli.output import Output, document_text

if TYPE_CHECKING:
    from rich.console import RenderableType

T = TypeVar("T")

VOLATILE = frozenset({"standing"})
"""Fields that move with the clock alone (a tenant's decayed usage), not a change to show."""


def steady(data: Any) -> Any:
    """``data`` without its volatile fields, to tell a change from the clock's ticking."""
    if isinstance(data, dict):
        return {k: steady(v) for k, v in data.items() if k not in VOLATILE}
    if isinstance(data, list):
        return [steady(v) for v in data]
    return data


def watch(
    fetch: Callable[[], T],
    show: Callable[[T], RenderableType],
    *,
    output: Output,
    interval: float,
    sleep: Callable[[float], None] | None = None,
) -> None:
    """Fetch every ``interval`` seconds and show what changed; return on Ctrl-C (``sleep``:
    how to wait, ``time.sleep`` unless told)."""
    from rich.live import Live

    from kiban.cli import render

    pause = sleep or time.sleep
    live: Live | None = None
    last: Any = None
    shown = False
    try:
        while True:
            data = fetch()
            changed = not shown or steady(data) != last
            if output is Output.JSON:
                if changed:
                    sys.stdout.write(json.dumps(data, separators=(",", ":")) + "\n")
            elif output is Output.YAML:
                if changed:
                    sys.stdout.write("---\n" + document_text(data, output))
            elif render.out.is_interactive:  # a terminal that can move its cursor
                if live is None:
                    live = Live(console=render.out, auto_refresh=False)
                    live.start()
                live.update(show(data), refresh=True)
            elif changed:
                if shown:
                    render.out.print()
                render.out.print(show(data), soft_wrap=True)
            sys.stdout.flush()
            last, shown = steady(data), True
            pause(interval)
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()
