"""The model server as a real process: ready over HTTP, streams a chat, exits 3 on a bad model."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import kiban
from kiban.testing import eventually

pytestmark = pytest.mark.e2e

SRC = str(Path(kiban.__file__).resolve().parents[1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    env.pop("MASTER_PORT", None)
    return subprocess.Popen(
        [sys.executable, "-m", "kiban.serving.runtime", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def unix_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uds") / "replica.sock"


@pytest.fixture(scope="module")
def server(tiny_lm_dir: Path, unix_path: Path) -> Iterator[str]:
    port = _free_port()
    process = _start(
        "--model_dir",
        str(tiny_lm_dir),
        "--model_name",
        "tiny",
        "--http_port",
        str(port),
        "--backend",
        "vllm",
        "--tensor-parallel-size",
        "1",
        "--uds",
        str(unix_path),
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert process.poll() is None, process.communicate()[1]
        try:
            return httpx.get(f"{base}/v2/health/ready", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        # 180 s: a loaded 2-core machine (as the e2e tests allow)
        eventually(ready, what="the runtime server to be ready", timeout=180, interval=0.1)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, stderr = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    # uvicorn shuts down cleanly, then lets the signal end the process as it would have
    assert process.returncode in (0, -signal.SIGTERM), stderr
    assert "Application shutdown complete" in stderr
    assert "ignoring arguments this server does not use: --backend vllm" in stderr
    assert not unix_path.exists()  # the server removes its socket when it stops


def test_answers_on_its_unix_socket_too(server: str, unix_path: Path) -> None:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(unix_path))) as client:
        assert client.get("http://localhost/v2/health/ready").status_code == 200
    assert unix_path.stat().st_mode & 0o777 == 0o600


def test_streams_a_chat_completion(server: str) -> None:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream(
        "POST", f"{server}/openai/v1/chat/completions", json=body, timeout=30
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    *pieces, usage = chunks
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in pieces)
    assert pieces[-1]["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 8
    whole = httpx.post(
        f"{server}/openai/v1/chat/completions",
        json={**body, "stream": False, "stream_options": None},
        timeout=30,
    ).json()
    assert streamed == whole["choices"][0]["message"]["content"] != ""


def test_a_bad_model_dir_exits_3_with_one_load_failed_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')  # no weights, no tokenizer
    process = _start("--model_dir", str(tmp_path), "--port", str(_free_port()))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 3, stderr
    failed = [line for line in stderr.splitlines() if line.startswith("KIBAN_LOAD_FAILED: ")]
    assert len(failed) == 1, stderr
    assert str(tmp_path) in failed[0]


def test_an_unknown_dtype_is_a_load_failure(tiny_lm_dir: Path) -> None:
    process = _start(
        "--model_dir", str(tiny_lm_dir), "--dtype", "float8", "--port", str(_free_port())
    )
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 3, stderr
    assert "KIBAN_LOAD_FAILED: unknown dtype 'float8'" in stderr
