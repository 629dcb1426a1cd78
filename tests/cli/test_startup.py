"""What the CLI imports to answer: nothing of the server, the store, the manifest models, the
ML stack or Kubernetes for ``kiban ls``, ``describe`` and ``--version`` (each import costs start-up
time on every call; ``kiban bench cli`` measures it). Each runs in a fresh interpreter against a
small stand-in for the API, and reports the modules it ended with. And how it ends: a command
that only reads skips the interpreter's teardown, its output and exit code as they were."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

JOB = {
    "id": "train-abc123",
    "name": "train",
    "tenant": "default",
    "queue": "default",
    "state": "Pending",
    "priority": 0,
    "attempt": 1,
    "submittedAt": 1_700_000_000.0,
    "admittedAt": None,
    "startedAt": None,
    "finishedAt": None,
    "reason": {"code": "QueueBacklog", "message": "waits", "details": {}},
    "queuePosition": 1,
    "eta": None,
    "message": None,
    "gpus": 0,
    "replicaCount": 1,
    "spec": {"spec": {"tasks": [{"name": "worker", "command": ["true"]}]}},
    "replicas": [],
}
ANSWERS = {
    "/api/v1/jobs": [JOB],
    "/api/v1/arrays": [],  # kiban ls folds arrays: it reads them too
    "/api/v1/jobs/train-abc123": JOB,
    "/api/v1/jobs/train-abc123/events": [
        {"id": 1, "type": "Normal", "reason": "Submitted", "message": "hi", "at": 1.7e9}
    ],
}

HEAVY = (
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "torch",
    "transformers",
    "kubernetes",
    "matplotlib",
    "numpy",
    "pydantic",
    "pygments",
    "click",  # the real one: Typer has its own copy; httpx's command line would bring it
    "httpx",  # the SDK speaks HTTP through httpcore: httpx's import was a quarter of kiban ls
    "urllib.request",  # httpx's auth brought it, with http.client, email and cookiejar
    "http.client",
    "http.cookiejar",
    "kiban.domain.manifests",
    "kiban.domain.jobspec",
    "kiban.domain.cluster",
    "kiban.scheduler.core",  # the package itself loads its names on first use (wp/sched)
    "kiban.scheduler.snapshot",
    "kiban.services",
    "kiban.store",
    "kiban.server",
    "kiban.platform",
    "kiban.bench",
    "kiban.serving",
    "kiban.api",
    "kiban.cli.admin",  # the commands kiban ls does not call: loaded only when called
    "kiban.cli.bench",
    "kiban.cli.up",
    "kiban.cli.serving",
    "kiban.cli.policy",
    "kiban.cli.health",
    "kiban.cli.node_agent",
    "kiban.cli.sim",
    "kiban.cli.dev",
    "yaml",
    "typer.rich_utils",  # Typer's help in Rich: for --help, not for an answer
    "markdown_it",
    "rich.progress",
    "rich.syntax",
)


class Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        found = ANSWERS.get(self.path.split("?")[0])
        body = json.dumps(found).encode()
        self.send_response(200 if found is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


PROBE = """
import json, sys, threading
sys.argv = ["kiban", *json.loads(sys.argv[1])]
loaded_by = {{}}  # the thread that imported each module of Rich's

def record(event, args):
    if event == "import" and args[0].startswith("rich"):
        loaded_by.setdefault(args[0], threading.current_thread().name)

sys.addaudithook(record)
from kiban.cli.main import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
import gc
with open({modules!r}, "w") as f:
    json.dump(
        {{
            "code": code,
            "modules": sorted(k for k, v in sys.modules.items() if v is not None),
            "kept_out": sorted(k for k, v in sys.modules.items() if v is None),
            "gc_enabled": gc.isenabled(),
            "loaded_by": loaded_by,
            "threads": [t.name for t in threading.enumerate()],
        }},
        f,
    )
"""


def imported(args: list[str], url: str, tmp_path: Path) -> tuple[str, list[str]]:
    """What ``kiban ARGS`` printed, and every module it had imported at its end."""
    out, report = run_probe(args, url, tmp_path)
    return out, report["modules"]


def run_probe(args: list[str], url: str, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """What ``kiban ARGS`` printed, and the state of its interpreter at its end: modules
    imported, modules kept out (``None`` in ``sys.modules``), whether the collector runs,
    which thread imported each of Rich's modules, the threads left."""
    modules = tmp_path / "modules.json"
    env = {**os.environ, "KIBAN_URL": url, "KIBAN_TOKEN": "t", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(modules=str(modules)), json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(modules.read_text())
    assert report["code"] in (0, None), done.stderr
    return done.stdout, report


def heavy_in(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize(
    "args", [["ls"], ["describe", "train-abc123"], ["--version"]], ids=" ".join
)
def test_answering_imports_nothing_heavy(api_url: str, tmp_path: Path, args: list[str]) -> None:
    out, modules = imported(args, api_url, tmp_path)
    assert heavy_in(modules) == []
    if args[0] != "--version":
        assert "train-abc123" in out  # it did answer
        assert "httpcore" in modules and "rich.console" in modules  # what it needs, it has


def test_version_needs_neither_http_nor_rich(api_url: str, tmp_path: Path) -> None:
    out, modules = imported(["--version"], api_url, tmp_path)
    assert out.startswith("kiban ")
    assert "httpx" not in modules and "yaml" not in modules
    assert not [m for m in modules if m.split(".")[0] == "rich"]


def test_importing_the_cli_changes_nothing_but_what_it_imports() -> None:
    """Importing ``kiban.cli.main`` only imports: httpx's command line is kept out by the
    entry point (``main``), not as a side effect of the import (issue 22)."""
    probe = (
        "import sys, json; import kiban.cli.main; "
        "print(json.dumps(sorted(k for k, v in sys.modules.items() if v is None)))"
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "httpx._main" not in json.loads(done.stdout)


@pytest.mark.parametrize("args", [["ls"], ["describe", "train-abc123"]], ids=" ".join)
def test_answering_imports_no_httpx_and_collects_after(
    api_url: str, tmp_path: Path, args: list[str]
) -> None:
    """No httpx at all (the SDK's transport is httpcore's; httpx's command line, which the
    entry point keeps out for the commands that still use httpx, is not even asked for), and
    the garbage collector, paused while modules load, runs again after."""
    out, report = run_probe(args, api_url, tmp_path)
    assert "train-abc123" in out
    assert not [m for m in report["modules"] if m.split(".")[0] == "httpx"]
    assert "httpx._main" in report["kept_out"]
    assert report["gc_enabled"]


@pytest.mark.parametrize("args", [["ls"], ["describe", "train-abc123"]], ids=" ".join)
def test_rich_loads_while_the_server_answers(api_url: str, tmp_path: Path, args: list[str]) -> None:
    """Rich's console (a ninth of ``kiban ls``) is imported by the warm-up thread while the
    command waits for its first answer, and that thread has ended before the command prints:
    the command's own thread imported none of what it did."""
    out, report = run_probe(args, api_url, tmp_path)
    assert "train-abc123" in out
    loaded_by = report["loaded_by"]
    assert loaded_by["rich.console"] == "kiban-warm-up"
    assert loaded_by["rich.text"] == loaded_by["rich.cells"] == "kiban-warm-up"
    assert "kiban-warm-up" not in report["threads"]
    assert report["gc_enabled"]


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_structured_output_loads_no_rich(api_url: str, tmp_path: Path, form: str) -> None:
    """``-o json`` and ``-o yaml`` print no Rich: nothing of it is warmed up for them."""
    out, report = run_probe(["ls", "-o", form], api_url, tmp_path)
    assert "train-abc123" in out
    assert not [m for m in report["modules"] if m.split(".")[0] == "rich"]
    assert report["loaded_by"] == {}


class HangUp(BaseHTTPRequestHandler):
    """Reads the request, then closes the connection without an answer."""

    def do_GET(self) -> None:
        self.close_connection = True

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def hang_up_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), HangUp)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_answer_that_never_comes_is_one_error_line(hang_up_url: str, tmp_path: Path) -> None:
    """The warm-up started for the request is waited for when its answer fails: one error
    line with Rich's markup, no traceback."""
    done = kiban_entry(["ls"], hang_up_url, tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: cannot reach kiban at"), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


WITNESS = """
import atexit, sys

class Witness:
    def __del__(self):
        sys.stderr.write("torn down\\n")

witness = Witness()  # freed by the interpreter's teardown, which says so
atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
"""


def kiban_entry(args: list[str], url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``kiban ARGS`` through the console script's entry point, its output buffered as in a
    pipe, with a witness of the interpreter's teardown."""
    (tmp_path / "sitecustomize.py").write_text(WITNESS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update({"KIBAN_URL": url, "KIBAN_TOKEN": "t", "PYTHONDONTWRITEBYTECODE": "1"})
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "kiban.cli.entry", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "args", [["ls"], ["describe", "train-abc123"], ["--version"]], ids=" ".join
)
def test_reading_ends_without_the_interpreters_teardown(
    api_url: str, tmp_path: Path, args: list[str]
) -> None:
    done = kiban_entry(args, api_url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "torn down" not in done.stderr
    assert "atexit ran" in done.stderr  # what asked to run at exit did
    if args[0] == "--version":
        assert done.stdout.startswith("kiban ")
    else:
        assert "train-abc123" in done.stdout  # its output, flushed before the end


def test_a_usage_error_ending_at_once_keeps_its_message_and_code(
    api_url: str, tmp_path: Path
) -> None:
    done = kiban_entry(["ls", "--limit", "many"], api_url, tmp_path)
    assert done.returncode == 2
    assert "--limit" in done.stderr and "'many'" in done.stderr
    assert "torn down" not in done.stderr


def test_other_commands_end_as_python_does(api_url: str, tmp_path: Path) -> None:
    """``kiban up`` and the rest are not marked as only reading: they keep the teardown."""
    done = kiban_entry(["up", "--help"], api_url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "torn down" in done.stderr and "atexit ran" in done.stderr
