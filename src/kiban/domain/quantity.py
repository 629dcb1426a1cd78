"""Parsing of Kubernetes-style quantities ("4Gi", "500m") and durations ("2h", "1h30m")."""

from __future__ import annotations

import math
import re
from typing import Any

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_DECIMAL = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGTP]i|[kKMGTP])?$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d|w)")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _number(value: Any, example: str) -> float | int | str:
    """The value if it is a finite, non-negative number or a string; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        kind = "a boolean" if isinstance(value, bool) else type(value).__name__
        if value is None:
            kind = "empty"
        raise ValueError(f"expected a quantity such as {example}, not {kind}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite quantity such as {example}")
    if not isinstance(value, str) and value < 0:
        raise ValueError("must not be negative")
    return value


def parse_memory(value: Any) -> int:
    """Bytes in a memory quantity such as ``4Gi``, ``512Mi``, ``1G`` or a plain number."""
    value = _number(value, "4Gi")
    if isinstance(value, int | float):
        return int(value)
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a memory quantity (examples: 4Gi, 512Mi, 1G)")
    number, unit = match.groups()
    scale = _BINARY.get(unit or "", _DECIMAL.get(unit or "", 1))
    return int(float(number) * scale)


def parse_cpu_millis(value: Any) -> int:
    """Millicores in a CPU quantity such as ``2``, ``0.5`` or ``500m``."""
    value = _number(value, "2 or 500m")
    if isinstance(value, int | float):
        return round(value * 1000)
    text = value.strip()
    if re.fullmatch(r"[0-9]+m", text):
        return int(text[:-1])
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        return round(float(text) * 1000)
    raise ValueError(f"{value!r} is not a CPU quantity (examples: 2, 0.5, 500m)")


def parse_duration(value: Any) -> float:
    """Seconds in a duration such as ``2h``, ``1h30m``, ``90s`` or a plain number of seconds."""
    value = _number(value, "2h")
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        return float(text)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{value!r} is not a duration (examples: 90s, 30m, 2h, 1h30m, 7d)")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def format_memory(num_bytes: int) -> str:
    """The shortest exact binary-suffixed form of a byte count, e.g. ``4Gi``."""
    for unit in ("Pi", "Ti", "Gi", "Mi", "Ki"):
        scale = _BINARY[unit]
        if num_bytes >= scale and num_bytes % scale == 0:
            return f"{num_bytes // scale}{unit}"
    return str(num_bytes)


def format_duration(seconds: float) -> str:
    """A compact human form of a duration: ``1h02m``, ``3m05s``, ``12s``."""
    total = round(seconds)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
