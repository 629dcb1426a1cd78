"""Which variables ``kiban run`` gives a job: ``--env KEY=VALUE`` and ``--export``.

``--export`` works as Slurm's does, with another default: ``NONE`` (a job's environment is
what its command line and manifest say, the same wherever it runs; a laptop's ``PATH`` means
nothing in a pod). ``ALL`` copies the submitting shell's variables except those that must not
travel: secrets (``is_secret``), kiban's own ``KIBAN_*`` (``KIBAN_TOKEN`` among them; a job
gets a token of its own), the variables kiban sets for each replica, GPU visibility, and the
shell's bookkeeping. Named variables (``--export HF_HOME,WANDB_MODE=offline``) are sent as
asked, secrets included: naming one is not an accident. ``--env`` comes last and wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from kiban.domain.errors import SpecError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A variable name a manifest accepts (kiban.domain.jobspec.ENV_NAME)."""

SET_BY_KIBAN = frozenset({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"})
SET_BY_KIBAN_PREFIX = "KIBAN_"
"""Variables kiban sets for each replica and a manifest may not (kiban.domain.jobspec)."""

NOT_EXPORTED = frozenset(
    {
        # each replica sees only its own GPUs, which kiban chooses
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        # the submitting shell's bookkeeping
        "_",
        "PWD",
        "OLDPWD",
        "SHLVL",
    }
)
"""Variables ``--export ALL`` leaves out besides secrets and kiban's own."""

SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY")
"""A variable whose name holds one of these (``HF_TOKEN``, ``PGPASSWORD``) is a secret."""

SECRET_PARTS = frozenset({"KEY", "AUTH", "PRIVATE", "COOKIE", "SESSION", "PAT", "DSN"})
"""... or whose name has one of these between underscores (``OPENAI_API_KEY``,
``AWS_ACCESS_KEY_ID``, ``SSH_AUTH_SOCK``, ``SENTRY_DSN``); not ``MONKEY`` nor ``KEYBOARD``."""

URL_WITH_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@")
"""... or whose value is a URL holding a password (``postgresql://me:pw@db/x``)."""


def is_secret(name: str, value: str) -> bool:
    """Whether a variable looks like a credential that ``--export ALL`` must not send."""
    upper = name.upper()
    if any(word in upper for word in SECRET_WORDS):
        return True
    if SECRET_PARTS.intersection(upper.split("_")):
        return True
    return bool(URL_WITH_PASSWORD.match(value))


def set_by_kiban(name: str) -> bool:
    return name in SET_BY_KIBAN or name.startswith(SET_BY_KIBAN_PREFIX)


@dataclass(frozen=True)
class JobEnvironment:
    """The variables to send, and those ``--export ALL`` left out because they looked like
    secrets or were kiban's own (the CLI names them, so nothing is dropped silently)."""

    variables: dict[str, str]
    withheld: tuple[str, ...] = ()


def parse_env(items: list[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` options (repeatable; the last of a name wins)."""
    found: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError.single("--env", f"expected KEY=VALUE, not {item!r}")
        found[_checked_name("--env", key)] = value
    return found


def _checked_name(option: str, key: str) -> str:
    if not ENV_NAME.match(key):
        raise SpecError.single(option, f"{key!r} is not a valid environment variable name")
    if set_by_kiban(key):
        raise SpecError.single(option, f"{key} is set by kiban for each replica")
    return key


def job_environment(
    export: str | None, env: list[str], environ: Mapping[str, str]
) -> JobEnvironment:
    """The variables of ``kiban run --export EXPORT --env ...`` from the shell's ``environ``.

    ``export``: ``NONE`` (also None, the default), ``ALL``, or a comma-separated list of names
    (their values from ``environ``) and ``NAME=VALUE`` pairs, optionally after ``ALL``
    (``ALL,WANDB_MODE=offline``), as Slurm's ``--export`` reads them.
    """
    variables: dict[str, str] = {}
    withheld: list[str] = []
    items = [i.strip() for i in (export or "NONE").split(",")]
    if any(not i for i in items):
        raise SpecError.single("--export", f"an empty item in {export!r}")
    misplaced = [i for i in items[1:] if i.upper() in ("ALL", "NONE")]
    if misplaced:
        raise SpecError.single("--export", f"{misplaced[0]} comes first, alone or before names")
    head = items[0].upper()
    if head in ("ALL", "NONE"):
        items = items[1:]
        if head == "NONE" and items:
            raise SpecError.single("--export", "NONE exports nothing; give names without it")
        if head == "ALL":
            for name, value in sorted(environ.items()):
                if not ENV_NAME.match(name) or name in NOT_EXPORTED or name in SET_BY_KIBAN:
                    continue
                if name.startswith(SET_BY_KIBAN_PREFIX) or is_secret(name, value):
                    withheld.append(name)
                    continue
                variables[name] = value
    for item in items:
        name, sep, value = item.partition("=")
        _checked_name("--export", name)
        if not sep:
            if name not in environ:
                raise SpecError.single("--export", f"{name} is not set in this shell")
            value = environ[name]
        variables[name] = value
    variables.update(parse_env(env))
    return JobEnvironment(variables, tuple(n for n in withheld if n not in variables))
