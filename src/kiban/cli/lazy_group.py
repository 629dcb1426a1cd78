"""The ``kiban`` group whose commands load when called: only the invoked command's module is
imported (``kiban ls`` does not import the benchmarks, the admin commands or the server).

Each command is named in a registry with where it lives (``"module:attr"``) and the one line
``kiban --help`` and shell completion show for it, so that listing the commands imports none of
them (``tests/cli/test_lazy_commands.py`` checks each line against the command's own help).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

import typer
from typer._click.core import Command, Context
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command_from_info, get_group_from_info
from typer.models import CommandInfo, TyperInfo

from kiban.cli import quick


class Kind(Enum):
    """What a registry entry's target is."""

    COMMAND = "command"
    """A function (the command), or a ``typer.Typer`` holding a command of the entry's name."""
    GROUP = "group"
    """A ``typer.Typer`` of subcommands, mounted under the entry's name (``kiban admin ...``)."""


@dataclass(frozen=True)
class Lazy:
    """A command of the registry: where it lives and the line that lists it."""

    target: str
    """``"module:attr"``, imported when the command is called."""
    summary: str
    """What ``kiban --help`` shows beside the name: the first paragraph of its help."""
    kind: Kind = Kind.COMMAND
    at_once: bool = False
    """The command only asks the API and prints: after it, the process may end without the
    interpreter's teardown (``kiban.cli.quick.end``)."""


def listed_help(command: Command) -> str:
    """The text Typer lists a command with: the first paragraph of its help, on one line."""
    text = inspect.cleandoc(command.short_help or command.help or "")
    return text.split("\n\n")[0].replace("\n", " ").strip()


class Listed(TyperCommand):
    """A registered command not loaded yet: its name and its line in the list, nothing more."""


class LazyGroup(TyperGroup):
    """A Typer group that lists the commands of ``registry`` and imports one only when it is
    called (or completed past its name). Subclasses set ``registry``."""

    registry: ClassVar[Mapping[str, Lazy]] = {}
    resolved: ClassVar[str | None] = None
    """The command the last call named (None: none, as ``--version`` or ``--help`` alone)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, lazy in self.registry.items():
            self.commands.setdefault(name, Listed(name, help=lazy.summary))

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        type(self).resolved = name
        if name is not None and isinstance(command, Listed):
            command = self.load(name)
        return name, command, rest

    def load(self, name: str) -> Command:
        """The command ``name`` itself, its module imported (once)."""
        command = self.commands.get(name)
        if command is not None and not isinstance(command, Listed):
            return command
        lazy = self.registry[name]
        module_name, _, attr = lazy.target.partition(":")
        with quick.loading():
            found = getattr(importlib.import_module(module_name), attr)
        if lazy.kind is Kind.GROUP:
            command = get_group_from_info(
                TyperInfo(found, name=name),
                pretty_exceptions_short=True,
                rich_markup_mode=self.rich_markup_mode,
                suggest_commands=self.suggest_commands,
            )
        else:
            command = get_command_from_info(
                _command_info(name, found),
                pretty_exceptions_short=True,
                rich_markup_mode=self.rich_markup_mode,
            )
        self.commands[name] = command
        return command

    def load_all(self) -> dict[str, Command]:
        """Every command, loaded: for the tests that walk the whole command tree."""
        return {name: self.load(name) for name in self.list_commands(Context(self))}


def _command_info(name: str, found: object) -> CommandInfo:
    """The registered command ``name``: from a ``typer.Typer`` holding it (with the options of
    its decorator), or a bare function."""
    if isinstance(found, typer.Typer):
        for info in found.registered_commands:
            called = str(info.name or getattr(info.callback, "__name__", ""))
            if called.lower().replace("_", "-") == name:
                return info
        raise LookupError(f"{name!r} is not a command of the Typer it is registered in")
    if not callable(found):
        raise TypeError(f"{name!r} is registered as {found!r}, which is not a command")
    return CommandInfo(name=name, callback=found)
