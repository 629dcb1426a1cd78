"""Shell completion of names the server knows: job ids, queues, services.

Each runs inside a TAB press, so it asks the server once with a short timeout and, whatever
goes wrong (no server, no token, a slow answer), completes nothing rather than print an error
into the user's command line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiban.sdk.client import Client

TIMEOUT_S = 1.0
"""The longest a TAB press waits for the server."""

LIMIT = 200
"""Job ids offered at most (newest first)."""


def connect() -> Client:
    """The client completion asks through (tests replace it)."""
    from kiban.sdk.client import Client

    return Client(timeout=TIMEOUT_S)


def _names(ask: Callable[[Client], list[str]], incomplete: str) -> list[str]:
    try:
        with connect() as api:
            names = ask(api)
    except Exception:  # completion must never print a traceback into a command line
        return []
    return [n for n in names if n.startswith(incomplete)]


def job_ids(incomplete: str) -> list[str]:
    """Ids of the jobs the token may see, newest first."""
    return _names(lambda api: [j["id"] for j in api.jobs(limit=LIMIT)], incomplete)


def unfinished_job_ids(incomplete: str) -> list[str]:
    """Ids of the jobs that have not ended (what ``cancel`` and ``wait`` take)."""
    states = ["Pending", "Admitted", "Running", "Stopping"]
    return _names(lambda api: [j["id"] for j in api.jobs(state=states, limit=LIMIT)], incomplete)


def queue_names(incomplete: str) -> list[str]:
    return _names(lambda api: [q["name"] for q in api.queues()], incomplete)


def service_names(incomplete: str) -> list[str]:
    return _names(lambda api: [s["name"] for s in api.services()], incomplete)


def node_names(incomplete: str) -> list[str]:
    return _names(lambda api: [n["name"] for n in api.nodes()], incomplete)


def describe_targets(incomplete: str) -> list[str]:
    """``kiban describe``'s first word: a job id, ``service`` or ``node``."""
    return [w for w in ("service", "node") if w.startswith(incomplete)] + job_ids(incomplete)


def describe_names(ctx: Any, incomplete: str) -> list[str]:
    """``kiban describe service NAME``'s or ``node NAME``'s name; nothing after a job id."""
    if ctx.params.get("target") in ("service", "svc"):
        return service_names(incomplete)
    if ctx.params.get("target") == "node":
        return node_names(incomplete)
    return []
