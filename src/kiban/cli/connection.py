"""The API client a command talks through, made when the command runs (so that listing or
parsing imports no HTTP client, and tests can stand a client of their own in for it).

A command that prints through Rich gets Rich's console imported while it waits for the
server's first answer (``kiban.cli.quick.warm_up``): from the moment its request is sent to the
moment the answer's headers come, the one thing this process does is wait, and the server's
work is on the other core. Once the headers have come (or failed to), the command waits for
that import to finish, so it never imports Rich while the warm-up does.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpcore

    from kiban.sdk.client import Client

WARMED: tuple[str, ...] = ("rich.console",)
"""What printing a table or a description loads of Rich (its text, styles, cells, markup)."""

WAITING = "http11.receive_response_headers"
"""httpcore's step "the request is sent; now the answer", traced as ``WAITING.started``, then
``.complete`` or ``.failed`` (its ``trace`` extension)."""


def client() -> Client:
    """A client of the API at ``KIBAN_URL`` (or the kiban home's), with the caller's token."""
    from kiban.cli.quick import loading

    with loading():  # the HTTP client's modules: httpcore and h11 (no httpx)
        from kiban.sdk.client import Client

        api = Client()
    hooks = getattr(api, "event_hooks", None)  # None: a client that tests stood in for it
    if hooks is not None and prints_with_rich():
        hooks["request"].append(warming_up)
    return api


def warming_up(request: httpcore.Request) -> None:
    """A request hook of the SDK's client: Rich's console loads while the answer to
    ``request`` is awaited, and has loaded once its headers have come (or failed to)."""
    request.extensions["trace"] = _trace


def _trace(event: str, _info: dict[str, Any]) -> None:
    from kiban.cli.quick import warm_up, warmed

    step, _, stage = event.rpartition(".")
    if step != WAITING:
        return
    if stage == "started" and not all(name in sys.modules for name in WARMED):
        warm_up(WARMED)
    elif stage != "started":
        warmed()


def prints_with_rich() -> bool:
    """Whether the command running prints through Rich: any but one asked for ``-o json`` or
    ``-o yaml`` (and none outside a command)."""
    from typer._click.globals import get_current_context

    from kiban.cli.output import Output

    ctx = get_current_context(silent=True)
    if ctx is None:
        return False
    output = ctx.params.get("output")
    return not (isinstance(output, Output) and output.structured)
