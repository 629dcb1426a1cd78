"""The command line: KServe's names in both spellings, kiban's own, and unknown ones ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiban.serving.runtime.options import (
    Task,
    arg_problems,
    parse_dtype,
    parse_options,
    parse_task,
    unknown_options,
)


def test_kserve_names_in_both_spellings() -> None:
    snake = parse_options(
        [
            "--model_name",
            "m",
            "--model_dir",
            "/x",
            "--http_port",
            "9000",
            "--max_length",
            "128",
            "--task",
            "text_embedding",
        ]
    )
    dash = parse_options(
        [
            "--model-name",
            "m",
            "--model-dir",
            "/x",
            "--http-port",
            "9000",
            "--max-length",
            "128",
            "--task",
            "text_embedding",
        ]
    )
    assert snake == dash
    assert snake.model_name == "m"
    assert (snake.model_dir, snake.port, snake.max_length) == ("/x", 9000, 128)


@pytest.mark.parametrize("flag", ["--max_model_len", "--max-model-len", "--max_length"])
def test_max_model_len_is_max_length(flag: str) -> None:
    # vLLM's and KServe's Hugging Face server's name for the context length
    assert parse_options([flag, "4096"]).max_length == 4096
    assert parse_options([f"{flag}=512"]).ignored == ()


def test_kiban_options_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.delenv("KIBAN_REPLICA_HOST", raising=False)
    default = parse_options([])
    assert (default.model_name, default.host, default.port) == ("model", "127.0.0.1", 8080)
    assert (default.max_batch_size, default.max_request_bytes, default.max_tokens_limit) == (
        8,
        1 << 20,
        2048,
    )
    custom = parse_options(
        [
            "--max-batch-size",
            "3",
            "--max_batch_wait_ms",
            "0",
            "--max-request-bytes",
            "10",
            "--max-tokens-limit",
            "7",
            "--port",
            "1",
        ]
    )
    assert (
        custom.max_batch_size,
        custom.max_batch_wait_ms,
        custom.max_request_bytes,
        custom.max_tokens_limit,
        custom.port,
    ) == (3, 0.0, 10, 7, 1)


def test_port_defaults_to_master_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASTER_PORT", "23456")
    assert parse_options([]).port == 23456
    assert parse_options(["--http_port", "80"]).port == 80


def test_a_unix_socket_from_the_flag_or_the_local_executors_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KIBAN_REPLICA_SOCKET", raising=False)
    assert parse_options([]).uds is None
    monkeypatch.setenv("KIBAN_REPLICA_SOCKET", "/run/r.sock")
    assert parse_options([]).uds == "/run/r.sock"
    assert parse_options(["--uds", "/tmp/x.sock"]).uds == "/tmp/x.sock"


def test_the_host_from_the_flag_or_the_executors_variable_else_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KIBAN_REPLICA_HOST", raising=False)
    assert parse_options([]).host == "127.0.0.1"
    monkeypatch.setenv("KIBAN_REPLICA_HOST", "")  # set but empty: as if unset
    assert parse_options([]).host == "127.0.0.1"
    monkeypatch.setenv("KIBAN_REPLICA_HOST", "0.0.0.0")  # what a Kubernetes pod is given
    assert parse_options([]).host == "0.0.0.0"
    assert parse_options(["--host", "10.1.2.3"]).host == "10.1.2.3"


def test_unknown_kserve_arguments_are_kept_as_ignored() -> None:
    options = parse_options(
        [
            "--backend",
            "vllm",
            "--model_name",
            "m",
            "--tensor_parallel_size",
            "2",
            "--enable_prefix_caching",
        ]
    )
    assert options.model_name == "m"
    assert options.ignored == (
        "--backend",
        "vllm",
        "--tensor_parallel_size",
        "2",
        "--enable_prefix_caching",
    )


def test_unknown_options_are_found_before_the_server_runs() -> None:
    args = [
        "--backend",
        "vllm",
        "--model_name",
        "m",
        "--max-batch=3",
        "--max_length",
        "7",
        "--enable_prefix_caching",
        "--max_model_len=4096",
    ]
    assert unknown_options(args) == [
        (0, "--backend", None),
        (4, "--max-batch", "--max-batch-size"),
        (7, "--enable_prefix_caching", None),
    ]
    # the flags the server itself ignores
    ignored = [a.partition("=")[0] for a in parse_options(args).ignored if a.startswith("-")]
    assert ignored == [flag for _, flag, _ in unknown_options(args)]
    # values are the server's to refuse, as before
    assert unknown_options(["--max_length=abc", "--task", "nonsense", "--port", "-1"]) == []
    assert unknown_options(["--model_name", "--dash-named-model"]) == []


def test_the_options_import_neither_torch_nor_transformers() -> None:
    import subprocess
    import sys

    code = (
        "import sys, kiban.serving.runtime.options as o; o.unknown_options(['--x']); "
        "print(sorted({'torch', 'transformers', 'numpy', 'fastapi'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_bad_numbers_are_usage_errors() -> None:
    with pytest.raises(SystemExit) as exited:
        parse_options(["--max-batch-size", "0"])
    assert exited.value.code == 2


@pytest.mark.parametrize(
    ("given", "task"),
    [
        ("auto", Task.AUTO),
        ("generate", Task.TEXT_GENERATION),
        ("text-generation", Task.TEXT_GENERATION),
        ("embed", Task.TEXT_EMBEDDING),
        ("text_embedding", Task.TEXT_EMBEDDING),
    ],
)
def test_task_aliases(given: str, task: Task) -> None:
    assert parse_task(given) is task


def test_unknown_task_and_dtype_name_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown task 'translate'.*text_generation"):
        parse_task("translate")
    with pytest.raises(ValueError, match=r"unknown dtype 'int3'.*bfloat16"):
        parse_dtype("int3")
    assert parse_dtype("bf16") == "bfloat16"


def test_the_unix_socket_replaces_a_stale_one_and_nothing_else(tmp_path: Path) -> None:
    from kiban.serving.runtime.__main__ import unix_socket

    path = tmp_path / "replica.sock"
    unix_socket(str(path)).close()  # a server that died leaves its socket behind
    unix_socket(str(path)).close()
    assert path.is_socket() and path.stat().st_mode & 0o777 == 0o600
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    with pytest.raises(OSError):
        unix_socket(str(other))
    assert other.read_text() == "mine"


def test_every_problem_of_the_args_is_reported_at_once() -> None:
    args = ["--port", "9000", "--max_batch_size", "0", "--dtype", "int3", "--uds=/x", "--task"]
    assert arg_problems(args) == [
        (0, "--port is set by kiban for each replica; remove it"),
        (2, "--max_batch_size: must be at least 1, got 0"),
        (4, "unknown dtype 'int3'; expected one of: auto, float32, float16, bfloat16"),
        (6, "--uds is set by kiban for each replica; remove it"),
        (7, "--task: expected one argument"),
    ]
    # a flag where a value should be is no value: both are read, as argparse reads them
    assert arg_problems(["--max_length", "--max_batch_size", "0"]) == [
        (0, "--max_length: expected one argument"),
        (1, "--max_batch_size: must be at least 1, got 0"),
    ]


@pytest.mark.parametrize(
    ("args", "problems"),
    [
        (["--model_name", "m", "--max_batch_size=4", "--dtype", "bf16"], []),
        (["--task", "translate", "--task", "embed"], []),  # the last one counts, as argparse's
        (["--foo", "-h"], [(1, "-h makes the model server print its usage and exit")]),
        (["--port", "9000"], [(0, "--port is set by kiban for each replica; remove it")]),
        (["--max_batch_size"], [(0, "--max_batch_size: expected one argument")]),
        (["--max_batch_wait_ms=-1"], [(0, "--max_batch_wait_ms: must not be negative, got -1.0")]),
        (
            ["--max_length", "8", "--max-model-len", "x"],
            [(2, "--max-model-len: must be a whole number, got 'x'")],
        ),
        (
            ["--task", "translate"],
            [
                (
                    0,
                    "unknown task 'translate'; expected one of: auto, embed, embedding, generate, "
                    "generation, text_embedding, text_generation",
                )
            ],
        ),
    ],
)
def test_args_that_keep_the_server_from_serving_are_found_before_it_runs(
    args: list[str], problems: list[tuple[int | None, str]]
) -> None:
    assert arg_problems(args) == problems


def test_the_usage_names_the_command_people_type(capsys: pytest.CaptureFixture[str]) -> None:
    from typer.testing import CliRunner

    from kiban.cli.main import app

    result = CliRunner().invoke(app, ["model-server", "--help"])
    assert result.exit_code == 0
    assert result.output.startswith("usage: kiban model-server [-h]")
    assert "python -m" not in result.output
    with pytest.raises(SystemExit):
        parse_options(["--max_batch_size", "0"])
    assert "usage: kiban model-server" in capsys.readouterr().err
