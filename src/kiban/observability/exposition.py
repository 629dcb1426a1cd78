"""Prometheus's text format, written straight from rows for the large families.

prometheus-client's path makes a ``Sample`` per series, then validates and escapes every label
name of every sample as it writes it: at 16,384 nodes (over 200,000 series) that alone took
seconds. A ``Family`` here holds its label names once (names we wrote, valid by construction)
and its rows as plain tuples, and is written with one format string; label values are escaped
only when they hold a character that needs it. Families from prometheus-client (histograms)
are written by prometheus-client itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client import generate_latest
from prometheus_client.core import Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(slots=True)
class Family:
    """A gauge or counter family: its name (a counter's without ``_total``), help, label names
    and rows of (label values, value); ``ones``: more rows, each of value 1 (a state set, one
    series per object for its current state), written without a value per row."""

    name: str
    documentation: str
    type: Literal["gauge", "counter"] = "gauge"
    labels: tuple[str, ...] = ()
    rows: list[tuple[tuple[str, ...], float]] = field(default_factory=list)
    ones: Sequence[tuple[str, ...]] = ()

    def add(self, values: tuple[str, ...], value: float) -> None:
        self.rows.append((values, value))


def render(families: Iterable[Family | Metric]) -> bytes:
    """The families in Prometheus's text format (version 0.0.4)."""
    parts: list[str] = []
    for family in families:
        if isinstance(family, Family):
            parts.extend(_lines(family))
        else:
            parts.append(generate_latest(_Only(family)).decode())
    return "".join(parts).encode()


def _lines(family: Family) -> Iterator[str]:
    name = f"{family.name}_total" if family.type == "counter" else family.name
    documentation = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    yield f"# HELP {name} {documentation}\n# TYPE {name} {family.type}\n"
    if not family.labels:
        for _, value in family.rows:
            yield f"{name} {_number(value)}\n"
        return
    labels = name + "{" + ",".join(f'{label}="%s"' for label in family.labels) + "} "
    template = labels + "%s\n"
    rows = family.rows
    if _ESCAPED.search("".join([v for values, _ in rows for v in values])):
        rows = [(tuple(_escape(v) for v in values), value) for values, value in rows]
    texts: dict[float, str] = {}  # values repeat (0, 1, a node's GPUs): each written once
    lines = []
    for values, value in rows:
        text = texts.get(value)
        if text is None:
            text = texts[value] = _number(value)
        lines.append(template % (*values, text))
    yield "".join(lines)
    ones = family.ones
    if _ESCAPED.search("".join([v for values in ones for v in values])):
        ones = [tuple(_escape(v) for v in values) for values in ones]
    yield "".join(map((labels + "1\n").__mod__, ones))


_ESCAPED = re.compile(r'[\\"\n]')


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
    return value


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class _Only:
    """One prometheus-client family as a collector, for ``generate_latest``."""

    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterable[Metric]:
        return [self.family]
