"""``-o table|wide|json|yaml``: the forms a listing or description is printed in."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer


class Output(StrEnum):
    """``table`` for people; ``wide`` the same with more columns; ``json`` and ``yaml`` what
    the API answered, for scripts."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"

    @property
    def structured(self) -> bool:
        return self in (Output.JSON, Output.YAML)


OutputOpt = Annotated[
    Output,
    typer.Option(
        "--output", "-o", help="table, wide (more columns), json or yaml", case_sensitive=False
    ),
]


def document_text(data: Any, output: Output) -> str:
    """``data`` as JSON (indented) or YAML, ending in a newline."""
    if output is Output.YAML:
        import yaml

        return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return json.dumps(data, indent=2) + "\n"


def print_document(data: Any, output: Output) -> None:
    sys.stdout.write(document_text(data, output))
