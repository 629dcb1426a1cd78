"""Quantities and times as people read them, for the sentences of reasons and messages.

Memory in binary units (``1 GiB``, ``23.5 GiB``, ``512 MiB``), CPUs as a plain number (``2``,
``0.5``), durations in their two largest units (``2h 5m``), and times relative to a given
``now`` (``in 2h 5m``, ``3m ago``): the core reads no clock, so it says "when" relative to its
snapshot's ``now``, and readers that hold a clock add the local time. Machines read the raw
numbers from a reason's details (or ``-o json``), never from these.
"""

from __future__ import annotations

_BINARY = (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def size(num_bytes: int | float) -> str:
    """``1 GiB``, ``23.5 GiB``, ``512 MiB``, ``100 B``: the largest unit it reaches, with at most
    one decimal (dropped when it is 0)."""
    value = float(num_bytes)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, scale in _BINARY:
        if value >= scale:
            return f"{sign}{_one_decimal(value / scale)} {unit}"
    return f"{sign}{value:.0f} B"


def cpus(millis: int | float) -> str:
    """CPUs from millicores: ``2``, ``0.5``, ``1.25``."""
    return f"{millis / 1000:g}"


_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def duration(seconds: float) -> str:
    """A duration in its two largest units, seconds only under a minute: ``45s``, ``5m``,
    ``2h 5m``, ``3d 4h`` (so a sentence that says it changes at most once a minute)."""
    total = max(round(seconds), 0)
    if total < 60:
        return f"{total}s"
    total -= total % 60
    parts: list[str] = []
    for unit, scale in _UNITS:
        count, total = divmod(total, scale)
        if count or parts:
            parts.append(f"{count}{unit}")
        if len(parts) == 2:
            break
    if len(parts) == 2 and parts[1].startswith("0"):
        parts.pop()
    return " ".join(parts)


def relative(at: float, now: float) -> str:
    """``at`` said from ``now``: ``in 2h 5m``, ``3m ago``, or ``now`` (within a second)."""
    delta = at - now
    if abs(delta) < 1:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"


def _one_decimal(value: float) -> str:
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text
