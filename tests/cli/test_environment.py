"""``kiban run --export``: which of the shell's variables a job gets, and what counts as a
secret that ``ALL`` must not send."""

from __future__ import annotations

import pytest

from kiban.cli import environment
from kiban.cli.environment import is_secret, job_environment
from kiban.domain import jobspec
from kiban.domain.errors import SpecError


@pytest.mark.parametrize(
    ("name", "value", "secret"),
    [
        ("KIBAN_TOKEN", "x", True),
        ("HF_TOKEN", "x", True),
        ("GITHUB_TOKEN", "x", True),
        ("AWS_SECRET_ACCESS_KEY", "x", True),
        ("AWS_ACCESS_KEY_ID", "x", True),
        ("AWS_SESSION_TOKEN", "x", True),
        ("OPENAI_API_KEY", "x", True),
        ("WANDB_API_KEY", "x", True),
        ("PGPASSWORD", "x", True),
        ("MYSQL_PWD_PASSWD", "x", True),
        ("SSH_AUTH_SOCK", "/tmp/agent", True),
        ("GPG_PRIVATE", "x", True),
        ("SENTRY_DSN", "https://k@sentry.io/1", True),
        ("DATABASE_URL", "postgresql://me:pw@db/x", True),  # a password in a URL
        ("DATABASE_URL", "postgresql://db/x", False),
        ("HTTPS_PROXY", "http://user:pass@proxy:3128", True),
        ("PATH", "/usr/bin", False),
        ("HOME", "/root", False),
        ("MONKEY", "x", False),  # KEY only between underscores
        ("KEYBOARD_LAYOUT", "us", False),
        ("PYTHONPATH", "/src", False),
        ("WANDB_MODE", "offline", False),
        ("HF_HOME", "/data/hf", False),
    ],
)
def test_is_secret(name: str, value: str, secret: bool) -> None:
    assert is_secret(name, value) is secret


SHELL = {
    "PATH": "/venv/bin:/usr/bin",
    "HF_HOME": "/data/hf",
    "HF_TOKEN": "hf_abc",
    "KIBAN_TOKEN": "member",
    "KIBAN_HOME": "/home/me/.kiban",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "RANK": "3",
    "PWD": "/home/me",
    "BASH_FUNC_x%%": "() { :; }",
}


def test_the_default_exports_nothing() -> None:
    for export in (None, "NONE", "none"):
        assert job_environment(export, [], SHELL).variables == {}


def test_all_leaves_out_secrets_kibans_own_and_what_kiban_sets() -> None:
    found = job_environment("ALL", [], SHELL)
    assert found.variables == {"PATH": "/venv/bin:/usr/bin", "HF_HOME": "/data/hf"}
    assert found.withheld == ("HF_TOKEN", "KIBAN_HOME", "KIBAN_TOKEN")


def test_names_values_and_env_in_order_of_precedence() -> None:
    found = job_environment("all,HF_TOKEN,MODE=fast", ["MODE=slow", "X=1"], SHELL)
    assert found.variables["HF_TOKEN"] == "hf_abc"  # named: sent, and no longer withheld
    assert found.variables["MODE"] == "slow"  # --env last
    assert found.variables["X"] == "1"
    assert found.withheld == ("KIBAN_HOME", "KIBAN_TOKEN")
    assert job_environment("HF_HOME", [], SHELL).variables == {"HF_HOME": "/data/hf"}


@pytest.mark.parametrize(
    ("export", "env", "message"),
    [
        ("HF_HOME,,X", [], "an empty item"),
        ("CUDA_VISIBLE_DEVICES=1,MASTER_PORT=1", [], "MASTER_PORT is set by kiban"),
        ("KIBAN_HOME", [], "KIBAN_HOME is set by kiban"),
        (None, ["KIBAN_X=1"], "KIBAN_X is set by kiban"),
        ("MISSING", [], "MISSING is not set in this shell"),
        (None, ["A B=1"], "'A B' is not a valid environment variable name"),
    ],
)
def test_refusals_name_the_option(export: str | None, env: list[str], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        job_environment(export, env, SHELL)
    (problem,) = caught.value.problems
    assert problem.field in ("--export", "--env")
    assert message in problem.message


def test_the_cli_knows_what_the_manifest_refuses() -> None:
    # Copied so that `kiban run` imports no manifest models; kept equal here.
    assert frozenset(jobspec.RESERVED_ENV) == environment.SET_BY_KIBAN
    assert environment.SET_BY_KIBAN_PREFIX == jobspec.RESERVED_ENV_PREFIX
    assert environment.ENV_NAME.pattern == jobspec.ENV_NAME.pattern
