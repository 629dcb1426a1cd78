"""Typer's coercion of plain parameters, without pydantic.

Typer (0.29) turns each parameter's command-line text into its annotated type through a pydantic
``TypeAdapter``: the first command with a string or number option imports pydantic and builds
one adapter per parameter, which took longer than the rest of ``kiban ls`` together (``kiban
bench cli``; pydantic's import alone about as long as Typer's). The CLI's parameters are plain:
strings, numbers with bounds, enums, lists of these. Those are coerced here the way Typer's own
adapters coerce them (``tests/cli/test_coercion.py`` runs both on the same inputs); any other
type (paths, files, dates, custom parsers, tuples) goes to Typer as before. If Typer's internals
move, ``install`` changes nothing and the CLI is only slower.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, get_args, get_origin

Convert = Callable[[Any, Any], Any]
"""``(value, click context) -> coerced value``; raises ValueError with a message for the user."""


def _text(value: Any, _ctx: Any) -> str:
    if value is None:
        raise ValueError("None is not a valid string")
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


TRUE_WORDS = frozenset({"1", "true", "t", "yes", "y", "on"})
FALSE_WORDS = frozenset({"", "0", "false", "f", "no", "n", "off"})
"""The words pydantic reads as booleans (what Typer's flags and ``--x true`` accept)."""


def _flag(value: Any, _ctx: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise ValueError("Input should be a valid boolean, unable to interpret input")


INTEGER = re.compile(r"^[+-]?[0-9]+(?:_[0-9]+)*(?:\.0*)?$")
"""An integer as pydantic reads one from text: ASCII digits, ``_`` between them, ``.0``."""


def _number(kind: type, info: Any) -> Convert:
    """An int or float within ``min``/``max`` (clamped to them with ``clamp``)."""
    name = "integer" if kind is int else "number"

    def parse(value: Any) -> Any:
        if isinstance(value, bool) or value is None:
            raise ValueError(f"Input should be a valid {name}")
        if kind is int and isinstance(value, str):
            text = value.strip()
            if not INTEGER.match(text):
                raise ValueError(f"Input should be a valid integer, not {value!r}")
            return int(text.split(".")[0])
        try:
            number = kind(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError):
            raise ValueError(f"Input should be a valid {name}, not {value!r}") from None
        if kind is int and number != value:
            raise ValueError(f"Input should be a valid integer, not {value!r}")
        return number

    def convert(value: Any, _ctx: Any) -> Any:
        number = parse(value)
        low, high = info.min, info.max
        if info.clamp:
            if low is not None and number < low:
                return kind(low)
            if high is not None and number > high:
                return kind(high)
            return number
        if low is not None and not number >= low:  # NaN is not
            raise ValueError(f"Input should be greater than or equal to {low}")
        if high is not None and not number <= high:
            raise ValueError(f"Input should be less than or equal to {high}")
        return number

    return convert


def _choice(choices: tuple[Any, ...], case_sensitive: bool) -> Convert:
    from typer._param_types import coerce_cli_choice

    def convert(value: Any, ctx: Any) -> Any:
        return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)

    return convert


def plain_converter(annotation: Any, info: Any) -> Convert | None:
    """How to coerce a parameter of this annotation here; None: leave it to Typer."""
    if getattr(info, "parser", None) is not None:
        return None
    if get_origin(annotation) is list:
        (item,) = get_args(annotation) or (None,)
        each = None if item is None else plain_converter(item, info)
        if each is None:
            return None
        convert_item = each

        def convert_list(value: Any, ctx: Any) -> list[Any]:
            items = value if isinstance(value, list | tuple) else [value]
            return [convert_item(v, ctx) for v in items]

        return convert_list
    if annotation is str:
        return _text
    if annotation is bool:
        return _flag
    if annotation in (int, float):
        return _number(annotation, info)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _choice(tuple(annotation), info.case_sensitive)
    if get_origin(annotation) is Literal:
        return _choice(get_args(annotation), info.case_sensitive)
    return None


def install() -> bool:
    """Coerce plain parameters here from now on; False (and nothing changed) when this
    Typer's internals are not the ones this was written for."""
    try:
        from typer import _coercion, core
        from typer._click.exceptions import BadParameter
    except ImportError:
        return False
    original = getattr(core, "build_runtime_param", None)  # typer.core's own name for it
    base = getattr(_coercion, "RuntimeParam", None)
    if original is None or base is None or getattr(original, "kiban_plain", False):
        return original is not None and getattr(original, "kiban_plain", False)

    @dataclass(frozen=True)
    class PlainRuntimeParam(base):  # type: ignore[misc,valid-type]
        convert: Convert | None = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            assert self.convert is not None
            try:
                return self.convert(value, ctx)
            except ValueError as exc:
                raise BadParameter(str(exc), ctx=ctx, param=param) from None

    def build_runtime_param(descriptor: Any) -> Any:
        convert = None
        if getattr(descriptor, "file_annotation", None) is None:
            convert = plain_converter(descriptor.annotation, descriptor.parameter_info)
        if convert is None:
            return original(descriptor)
        return PlainRuntimeParam(
            parameter_info=descriptor.parameter_info,
            annotation=descriptor.annotation,
            convert=convert,
        )

    build_runtime_param.kiban_plain = True  # type: ignore[attr-defined]
    build_runtime_param.typer_original = original  # type: ignore[attr-defined]
    setattr(core, "build_runtime_param", build_runtime_param)  # noqa: B010
    return True
