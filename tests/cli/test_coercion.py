"""kiban's coercion of plain parameters gives what Typer's own (pydantic) coercion gives: the
same value, or a usage error where Typer's is one; other types are left to Typer."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import pytest
from typer import _coercion, core
from typer._click.exceptions import BadParameter
from typer.models import OptionInfo

from kiban.cli import coercion
from kiban.cli.output import Output


class Color(StrEnum):
    RED = "red"
    DARK_BLUE = "dark-blue"


@dataclass
class Param:
    """What coercion reads of a Click parameter."""

    multiple: bool = False
    nargs: int = 1


def outcome(build: Any, annotation: Any, info: OptionInfo, value: Any) -> tuple[str, Any]:
    descriptor = _coercion.resolve_type_descriptor(annotation=annotation, parameter_info=info)
    param = Param(multiple=annotation.__class__.__name__ == "GenericAlias")
    try:
        return ("value", build(descriptor).coerce(value, param=param, ctx=None))
    except BadParameter:
        return ("usage error", None)


CASES: list[tuple[Any, dict[str, Any], Any]] = [
    (str, {}, "text"),
    (str, {}, ""),
    (str, {}, " spaced "),
    (str, {}, None),
    (int, {}, "3"),
    (int, {}, "-3"),
    (int, {}, "x"),
    (int, {}, "3.5"),
    (int, {}, ""),
    (int, {}, 7),
    (int, {}, 7.0),
    (int, {}, 7.5),
    (int, {}, " 3"),
    (int, {}, "+3"),
    (int, {}, "3.000"),
    (int, {}, "1_000"),
    (int, {}, "1e3"),
    (int, {}, "0x10"),
    (int, {}, "\u0663"),  # an Arabic-Indic three: Python's int() reads it, pydantic does not
    (int, {"min": 1}, "0"),
    (int, {"min": 1}, "1"),
    (int, {"min": 0, "max": 8}, "9"),
    (int, {"min": 0, "max": 8, "clamp": True}, "9"),
    (int, {"min": 0, "max": 8, "clamp": True}, "-1"),
    (float, {}, "2.5"),
    (float, {}, "2"),
    (float, {}, "1e3"),
    (float, {}, "abc"),
    (float, {"min": 0.2}, "0.1"),
    (float, {"min": 0.2}, "0.2"),
    (float, {}, 1.0),
    (float, {}, " 2 "),
    (float, {}, "1_0.5"),
    (float, {}, "inf"),
    (float, {"min": 0.2}, "nan"),
    (float, {"min": 0.2}, "inf"),
    (float, {"min": 0, "clamp": True}, "-1"),
    (bool, {}, True),
    (bool, {}, "true"),
    (bool, {}, "False"),
    (bool, {}, "yes"),
    (bool, {}, "0"),
    (bool, {}, "maybe"),
    (bool, {}, None),
    (Output, {"case_sensitive": False}, "json"),
    (Output, {"case_sensitive": False}, "YAML"),
    (Output, {"case_sensitive": False}, Output.WIDE),
    (Output, {"case_sensitive": False}, "xml"),
    (Color, {}, "dark-blue"),
    (Color, {}, "RED"),
    (Literal["a", "b"], {}, "a"),
    (Literal["a", "b"], {}, "c"),
    (list[str], {}, ("a", "b")),
    (list[str], {}, None),
    (list[int], {}, ("1", "2")),
    (list[int], {}, ("1", "x")),
    (list[Output], {"case_sensitive": False}, ("json", "Wide")),
]


@pytest.mark.parametrize(("annotation", "options", "value"), CASES, ids=repr)
def test_same_outcome_as_typers_own(annotation: Any, options: dict[str, Any], value: Any) -> None:
    assert coercion.install()
    ours_build = core.build_runtime_param
    assert ours_build is not _coercion.build_runtime_param
    info = OptionInfo(**options)
    theirs = outcome(_coercion.build_runtime_param, annotation, info, value)
    ours = outcome(ours_build, annotation, info, value)
    descriptor = _coercion.resolve_type_descriptor(annotation=annotation, parameter_info=info)
    assert type(ours_build(descriptor)).__name__ == "PlainRuntimeParam"
    assert ours == theirs
    assert type(ours[1]) is type(theirs[1])


def test_the_cli_coerces_plainly() -> None:
    import kiban.cli.main  # noqa: F401  (installs it)

    assert getattr(core.build_runtime_param, "kiban_plain", False)
    assert coercion.install()  # a second call changes nothing and says it is in place


@pytest.mark.parametrize(
    ("annotation", "options"),
    [(Path, {}), (Path, {"exists": True}), (tuple[int, int], {}), (int, {"parser": int})],
    ids=repr,
)
def test_other_types_are_left_to_typer(annotation: Any, options: dict[str, Any]) -> None:
    assert coercion.plain_converter(annotation, OptionInfo(**options)) is None
