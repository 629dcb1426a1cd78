"""Command-line options of the model server: KServe's Hugging Face server names plus kiban's own.

kiban passes an InferenceService's ``args`` through unchanged, so every KServe
name is accepted in both ``--snake_case`` and ``--dash-case``; names this
server does not know are collected and logged as ignored, never an error
(``unknown_options`` finds them before the server runs, so ``kiban serve`` can
say so). Importing this module is cheap: no torch, no transformers.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Task(StrEnum):
    """What the served model does."""

    AUTO = "auto"
    TEXT_GENERATION = "text_generation"
    TEXT_EMBEDDING = "text_embedding"


_TASK_ALIASES = {
    "auto": Task.AUTO,
    "text_generation": Task.TEXT_GENERATION,
    "generate": Task.TEXT_GENERATION,
    "generation": Task.TEXT_GENERATION,
    "text_embedding": Task.TEXT_EMBEDDING,
    "embed": Task.TEXT_EMBEDDING,
    "embedding": Task.TEXT_EMBEDDING,
}

DTYPES = ("auto", "float32", "float16", "bfloat16")


def parse_task(value: str) -> Task:
    """``generate``/``embed`` and dashed spellings map to the canonical task; else ValueError."""
    key = value.strip().lower().replace("-", "_")
    if key not in _TASK_ALIASES:
        known = ", ".join(sorted(_TASK_ALIASES))
        raise ValueError(f"unknown task {value!r}; expected one of: {known}")
    return _TASK_ALIASES[key]


def parse_dtype(value: str) -> str:
    """A dtype name from DTYPES (``fp16``/``bf16``/``fp32`` accepted too); else ValueError."""
    key = value.strip().lower()
    aliases = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}
    key = aliases.get(key, key)
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {value!r}; expected one of: {', '.join(DTYPES)}")
    return key


@dataclass(frozen=True)
class ServerOptions:
    """Everything the server needs to know, parsed and defaulted.

    ``task`` and ``dtype`` stay strings here: a bad value is a load failure
    (reported on the KIBAN_LOAD_FAILED line), not a command-line usage error.
    """

    model_name: str = "model"
    model_id: str | None = None
    model_dir: str | None = None
    storage_uri: str | None = None
    task: str = "auto"
    dtype: str = "auto"
    max_length: int | None = None
    host: str = "127.0.0.1"
    """The address to bind: ``--host``, else ``$KIBAN_REPLICA_HOST``, else loopback."""
    port: int = 8080
    uds: str | None = None
    """A Unix socket to listen on as well as the port (for a router on the same machine)."""
    max_batch_size: int = 8
    max_batch_wait_ms: float = 5.0
    max_request_bytes: int = 1 << 20
    max_tokens_limit: int = 2048
    ignored: tuple[str, ...] = ()


SOCKET_ENV = "KIBAN_REPLICA_SOCKET"
"""Where kiban's local executor asks a replica to listen besides its port: a Unix socket path."""

HOST_ENV = "KIBAN_REPLICA_HOST"
"""The address an executor asks a replica to bind when loopback would not do: kiban's
Kubernetes executor sets ``0.0.0.0`` (the revision's Service and the control plane's probes
reach the pod's IP). Unset, the server binds 127.0.0.1, so that on a developer's machine a
model server is never exposed to the network; an explicit ``--host`` wins over both."""

DEFAULT_HOST = "127.0.0.1"


def _flag(name: str) -> list[str]:
    """Both spellings of an option: ``--model_name`` and ``--model-name``."""
    snake = "--" + name.replace("-", "_")
    dash = "--" + name.replace("_", "-")
    return [snake] if snake == dash else [snake, dash]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; ``allow_abbrev`` is off so KServe's unknown flags never match ours."""
    p = argparse.ArgumentParser(
        prog="kiban model-server",  # as people run it (replicas: python -m kiban.serving.runtime)
        description="Serve a local Hugging Face transformers model over HTTP (OpenAI API and "
        "Open Inference Protocol v2).",
        allow_abbrev=False,
    )
    p.add_argument(
        *_flag("model_name"),
        dest="model_name",
        default="model",
        help="the name clients use for the model (default: model)",
    )
    p.add_argument(
        *_flag("model_id"),
        dest="model_id",
        help="a Hugging Face id (org/name, org/name@revision or org/name:revision) looked up "
        "in the local cache",
    )
    p.add_argument(*_flag("model_dir"), dest="model_dir", help="a local model directory")
    p.add_argument(
        *_flag("storage_uri"),
        dest="storage_uri",
        help="file:///path, pvc://claim/path or hf://org/name[@revision] (or :revision)",
    )
    p.add_argument(
        *_flag("task"),
        dest="task",
        default="auto",
        help="auto | text_generation | text_embedding (also generate | embed)",
    )
    p.add_argument(
        *_flag("dtype"),
        dest="dtype",
        default="auto",
        help="auto | float32 | float16 | bfloat16 (auto is float32 on CPU)",
    )
    p.add_argument(
        *_flag("max_length"),
        *_flag("max_model_len"),  # vLLM's and KServe's Hugging Face server's name for it
        dest="max_length",
        type=_positive_int,
        help="the most tokens of context (prompt plus completion, or one input)",
    )
    p.add_argument(
        *_flag("http_port"),
        "--port",
        dest="port",
        type=int,
        help="port to listen on (default: $MASTER_PORT, else 8080)",
    )
    p.add_argument(
        "--host",
        help=f"address to bind (default: ${HOST_ENV}, set to 0.0.0.0 by kiban's Kubernetes "
        f"executor; else {DEFAULT_HOST})",
    )
    p.add_argument(
        "--uds",
        dest="uds",
        help="a Unix socket path to listen on as well as the port (default: "
        f"${SOCKET_ENV}, set by kiban's local executor; else none)",
    )
    p.add_argument(
        *_flag("max_batch_size"),
        dest="max_batch_size",
        type=_positive_int,
        default=8,
        help="most requests run together in one forward pass (default: 8)",
    )
    p.add_argument(
        *_flag("max_batch_wait_ms"),
        dest="max_batch_wait_ms",
        type=_non_negative_float,
        default=5.0,
        help="how long a request waits for others to batch with (default: 5)",
    )
    p.add_argument(
        *_flag("max_request_bytes"),
        dest="max_request_bytes",
        type=_positive_int,
        default=1 << 20,
        help="largest request body accepted (default: 1 MiB)",
    )
    p.add_argument(
        *_flag("max_tokens_limit"),
        dest="max_tokens_limit",
        type=_positive_int,
        default=2048,
        help="largest max_tokens a request may ask for (default: 2048)",
    )
    return p


def parse_options(argv: Sequence[str] | None = None) -> ServerOptions:
    """Parse ``argv`` (default: ``sys.argv[1:]``); unknown arguments land in ``ignored``."""
    parser = build_parser()
    namespace, unknown = parser.parse_known_args(argv)
    port = namespace.port
    if port is None:
        from_env = os.environ.get("MASTER_PORT") or "8080"
        if not from_env.isdigit():
            parser.error(f"$MASTER_PORT must be a port number, got {from_env!r}")
        port = int(from_env)
    return ServerOptions(
        model_name=namespace.model_name,
        model_id=namespace.model_id,
        model_dir=namespace.model_dir,
        storage_uri=namespace.storage_uri,
        task=namespace.task,
        dtype=namespace.dtype,
        max_length=namespace.max_length,
        host=namespace.host or os.environ.get(HOST_ENV) or DEFAULT_HOST,
        port=port,
        uds=namespace.uds or os.environ.get(SOCKET_ENV) or None,
        max_batch_size=namespace.max_batch_size,
        max_batch_wait_ms=namespace.max_batch_wait_ms,
        max_request_bytes=namespace.max_request_bytes,
        max_tokens_limit=namespace.max_tokens_limit,
        ignored=tuple(unknown),
    )


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's own test: a value, not a flag


SET_BY_KIBAN = ("--port", "--http_port", "--http-port", "--uds")
"""Flags kiban sets for each replica itself (through ``$MASTER_PORT`` and
``$KIBAN_REPLICA_SOCKET``): one written in a service's args would move every replica to the same
port or socket, where kiban neither probes nor routes."""


def _takes_value() -> dict[str, bool]:
    """Every flag of the parser, and whether a value follows it (the parser's own table)."""
    takes_value: dict[str, bool] = {}
    for action in build_parser()._actions:
        takes_value |= dict.fromkeys(action.option_strings, action.nargs != 0)
    return takes_value


def _flags(args: Sequence[str], takes_value: Mapping[str, bool]) -> Iterator[tuple[int, str]]:
    """(index, flag) of each option in ``args``, as argparse reads them: a value after a known
    flag is skipped, one after an unknown flag is not an option either."""
    i = 0
    while i < len(args):
        arg = args[i]
        flag, has_value, _ = arg.partition("=")
        if flag in takes_value:
            yield i, flag
            i += 2 if takes_value[flag] and not has_value else 1
            continue
        if arg.startswith("-") and not _NEGATIVE_NUMBER.match(arg):
            yield i, flag
        i += 1


def unknown_options(args: Sequence[str]) -> list[tuple[int, str, str | None]]:
    """The options in ``args`` this server does not know, as (index, flag, closest known flag or
    None): what ``parse_options`` would put in ``ignored``. Values are not checked; a value
    after a known flag is skipped, one after an unknown flag is ignored along with it."""
    takes_value = _takes_value()
    found: list[tuple[int, str, str | None]] = []
    for i, flag in _flags(args, takes_value):
        if flag not in takes_value:
            close = difflib.get_close_matches(flag, list(takes_value), n=1, cutoff=0.75)
            found.append((i, flag, close[0] if close else None))
    return found


def option_values(args: Sequence[str]) -> argparse.Namespace:
    """The values of the options in ``args`` (unknown ones left out), without the environment's
    defaults that ``parse_options`` adds; raises ``argparse.ArgumentError`` where argparse
    would print a usage error and exit."""
    parser = build_parser()
    parser.exit_on_error = False
    return parser.parse_known_args(list(args))[0]


def _looks_like_flag(arg: str) -> bool:
    """Whether argparse reads ``arg`` as an option rather than as a value."""
    return arg.startswith("-") and arg != "-" and not _NEGATIVE_NUMBER.match(arg)


def arg_problems(args: Sequence[str]) -> list[tuple[int | None, str]]:
    """Everything in a service's ``args`` that would keep the server from ever serving, as
    (index of the argument; message), in the order written, found before any replica starts:
    ``--help`` (it prints the usage and exits), a flag kiban sets itself (``SET_BY_KIBAN``), a
    flag missing its value, a value the parser refuses (``--max_batch_size 0``), an unknown
    task or dtype. Every problem at once, not the first alone; as argparse, a repeated flag's
    last task or dtype is the one that counts."""
    actions = {
        option: action for action in build_parser()._actions for option in action.option_strings
    }
    problems: list[tuple[int | None, str]] = []
    counted: dict[str, tuple[int, str]] = {}  # dest -> (index, value) that argparse keeps
    i = 0
    while i < len(args):
        flag, has_value, inline = args[i].partition("=")
        action = actions.get(flag)
        if action is None:
            i += 1
            continue
        index, i = i, i + 1
        if flag in ("-h", "--help"):
            problems.append((index, f"{flag} makes the model server print its usage and exit"))
            continue
        value: str | None = inline if has_value else None
        if not has_value and i < len(args) and not _looks_like_flag(args[i]):
            value, i = args[i], i + 1
        if flag in SET_BY_KIBAN:
            problems.append((index, f"{flag} is set by kiban for each replica; remove it"))
            continue
        if value is None:
            problems.append((index, f"{flag}: expected one argument"))
            continue
        if action.type is not None and callable(action.type):
            try:
                action.type(value)
            except argparse.ArgumentTypeError as exc:
                problems.append((index, f"{flag}: {exc}"))
                continue
            except (TypeError, ValueError):
                problems.append((index, f"{flag}: invalid value {value!r}"))
                continue
        counted[action.dest] = (index, value)
    for name, check in (("task", parse_task), ("dtype", parse_dtype)):
        if name in counted:
            index, value = counted[name]
            try:
                check(value)
            except ValueError as exc:
                problems.append((index, str(exc)))
    return sorted(problems, key=lambda problem: -1 if problem[0] is None else problem[0])
