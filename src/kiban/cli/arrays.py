"""The CLI's job arrays and dependencies: ``kiban run --array 0-99%8 --after ID:ok``, and arrays
listed folded (one line each), described, waited for and cancelled as one."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kiban.cli.failure import fail

if TYPE_CHECKING:
    from rich.console import RenderableType

    from kiban.sdk.client import Client

_ARRAY = re.compile(r"^(?P<indices>[^%]+?)(?:%(?P<parallelism>[0-9]+))?$")
_CONDITIONS = {"ok": "Succeeded", "notok": "Failed", "any": "Finished"}
ENDED = ("Succeeded", "Failed", "Cancelled")


def array_spec(text: str) -> dict[str, Any]:
    """``--array 0-99%8`` as ``spec.array``: ``{"indices": "0-99", "parallelism": 8}`` (the
    server checks the ranges and says what is wrong with them)."""
    match = _ARRAY.match(text.strip())
    if match is None:
        fail(f"--array: {text!r} is not INDICES[%PARALLELISM] (examples: 0-99, 0-99%8, 1,3,5-7)")
    spec: dict[str, Any] = {"indices": match["indices"].strip()}
    if match["parallelism"] is not None:
        parallelism = int(match["parallelism"])
        if parallelism < 1:
            fail(f"--array: the parallelism after % must be at least 1, not {parallelism}")
        spec["parallelism"] = parallelism
    return spec


def dependency(text: str) -> dict[str, str]:
    """``--after ID[:ok|notok|any]`` as an entry of ``spec.dependsOn`` (default: ok)."""
    job, _, word = text.strip().partition(":")
    if not job:
        fail(f"--after: {text!r} names no job (ID, ID:ok, ID:notok or ID:any)")
    condition = _CONDITIONS.get(word.lower() if word else "ok")
    if condition is None:
        fail(f"--after {text}: {word!r} is not ok, notok or any")
    return {"job": job, "condition": condition}


def add_relations(document: dict[str, Any], array: str | None, after: list[str]) -> None:
    """Add ``--array`` and ``--after`` to a ``kiban run`` document's spec."""
    spec = document["spec"]
    if array is not None:
        spec["array"] = array_spec(array)
    if after:
        spec["dependsOn"] = [dependency(text) for text in after]


def is_array(answer: dict[str, Any]) -> bool:
    return answer.get("kind") == "JobArray"


def submitted_line(array: dict[str, Any]) -> str:
    """What stderr says of a submitted array: its jobs' ids and how many run at once."""
    first, size = array["id"], array["size"]
    limit = array.get("parallelism")
    at_once = f", at most {limit} at once" if limit else ""
    return (
        f"array {first} submitted to queue {array['queue']}: {size} jobs "
        f"{first}-<index> for indices {array['indices']}{at_once}"
    )


def counts_text(counts: dict[str, int]) -> str:
    """``3 Running, 7 Pending``: an array's indices by state, the busiest first."""
    order = ["Running", "Admitted", "Stopping", "Pending", *ENDED]
    named = sorted(counts, key=lambda s: (order.index(s) if s in order else len(order), s))
    return ", ".join(f"{counts[s]} {s}" for s in named if counts[s])


def folded(
    api: Client, *, state: list[str] | None, queue: str | None, limit: int
) -> list[dict[str, Any]]:
    """Jobs and arrays newest first, each array one row (its indices counted by state). With
    ``--state``, an array shows when some index is in one of those states."""
    jobs = api.jobs(state=state, queue=queue, limit=limit, array_indices=False)
    wanted = {s.lower() for s in state or ()}
    rows = list(jobs)
    for array in api.arrays(limit=limit):
        if queue and array["queue"] != queue:
            continue
        counts = array["counts"]
        if wanted and not any(s.lower() in wanted for s, n in counts.items() if n):
            continue
        rows.append(array_row(array))
    rows.sort(key=lambda row: (-row["submittedAt"], row["id"]))
    return rows[:limit]


def array_row(array: dict[str, Any]) -> dict[str, Any]:
    """An array as a row of ``kiban ls``'s table: its id, its counts as its state."""
    limit = array.get("parallelism")
    return {
        **array,
        "state": counts_text(array["counts"]) or "-",
        "replicaCount": f"{array['size']} jobs",
        "gpus": "",
        "reason": {"code": f"array {array['indices']}" + (f"%{limit}" if limit else "")},
        "priority": "",
        "message": "",
    }


def description(array: dict[str, Any]) -> RenderableType:
    """``kiban describe ARRAY``: what it is, its indices by state, what holds the others."""
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    limit = array.get("parallelism")
    for key, value in (
        ("Array", array["id"]),
        ("Name", array["name"]),
        ("Tenant", array["tenant"]),
        ("Queue", array["queue"]),
        ("Indices", f"{array['indices']} ({array['size']} jobs {array['id']}-<index>)"),
        ("Parallelism", str(limit) if limit else "no limit"),
        ("States", counts_text(array["counts"]) or "-"),
    ):
        table.add_row(key, escape(str(value)))
    for state, indices in (array.get("indicesByState") or {}).items():
        table.add_row(f"  {state}", escape(indices))
    held = array.get("held") or {}
    if held:
        table.add_row("Held", escape(", ".join(f"{n} for {gate}" for gate, n in held.items())))
    for entry in array.get("dependsOn") or []:
        table.add_row("Waits for", escape(f"{entry['job']} ({entry['condition']})"))
    return Group(table)


def array_instead(
    api: Client, array_id: str, error: Exception, indices: bool = False
) -> dict[str, Any]:
    """The array ``array_id`` names, where no job has that id (``error``, the job's 404, is
    raised again when no array has it either)."""
    from kiban.sdk.errors import ApiError

    try:
        return api.array(array_id, indices=indices)
    except ApiError as exc:
        if exc.status == 404:
            raise error from None
        raise


def not_found(exc: Exception) -> bool:
    from kiban.sdk.errors import ApiError

    return isinstance(exc, ApiError) and exc.status == 404
