"""``-o table|wide|json|yaml`` wherever ``-o json`` was, ``--watch``, ``--state`` in any case and
``kiban --version``; in-process against the app (conftest.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from cli_support import Run, flat
from fastapi.testclient import TestClient

from kiban import __version__
from kiban.cli import watch as watch_module
from kiban.cli.serving import services_table
from kiban.platform import Platform


@pytest.fixture
def two_jobs(kiban: Run) -> list[str]:
    ids = []
    for name in ("first", "second"):
        done = kiban("run", "--name", name, "--gpus", "1", "--", "train")
        assert done.code == 0, done.err
        ids.append(done.out.strip())
    return ids


def header(out: str) -> list[str]:
    return out.splitlines()[0].split()


@pytest.mark.parametrize(
    "args",
    [["ls"], ["queues"], ["nodes"], ["policy", "history"], ["services"]],
    ids=" ".join,
)
def test_yaml_is_the_json_answer(kiban: Run, two_jobs: list[str], args: list[str]) -> None:
    as_json = kiban(*args, "-o", "json")
    as_yaml = kiban(*args, "-o", "yaml")
    assert (as_json.code, as_yaml.code) == (0, 0), as_yaml.err
    assert yaml.safe_load(as_yaml.out) == json.loads(as_json.out)


def test_describe_in_yaml_and_wide(kiban: Run, two_jobs: list[str]) -> None:
    described = yaml.safe_load(kiban("describe", two_jobs[0], "-o", "yaml").out)
    assert described["id"] == two_jobs[0]
    assert described["events"][0]["reason"] == "Submitted"
    assert described["submittedBy"] == "admin"
    wide = kiban("describe", two_jobs[0], "-o", "wide").out
    table = kiban("describe", two_jobs[0]).out
    assert "Manifest" in wide and "Manifest" not in table
    assert "workingDir:" in wide  # the manifest as stored, the SDK's completion in it


def test_wide_adds_columns(kiban: Run, two_jobs: list[str]) -> None:
    ls = kiban("ls", "-o", "wide").out
    assert header(ls)[-5:] == ["NAME", "TENANT", "PRIORITY", "SUBMITTED", "MESSAGE"]
    assert {line.split()[9] for line in ls.splitlines()[1:]} == {"first", "second"}
    assert header(kiban("ls").out)[-1] == "ETA"
    queues = flat(kiban("queues", "-o", "wide").out)
    assert "BORROW LIMIT LEND LIMIT WEIGHT" in queues
    nodes = kiban("nodes", "-o", "wide").out
    assert header(nodes)[-2:] == ["FREE", "HEALTH"]
    history = kiban("policy", "history", "-o", "wide").out
    assert header(history)[-3:] == ["COHORTS", "PRIORITY", "CLASSES"]


def test_services_wide_adds_runtime_queue_and_scaling() -> None:
    service = {
        "name": "chat",
        "tenant": "default",
        "state": "Ready",
        "model": "m",
        "revisions": [{"readyReplicas": 1, "desiredReplicas": 2, "trafficPercent": 100}],
        "traffic": {"chat-00001": 100},
        "url": None,
        "runtime": "kiban",
        "queue": "default",
        "minReplicas": 1,
        "maxReplicas": 4,
        "scaleMetric": "concurrency",
    }
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    Console(file=out, width=200).print(services_table([service], wide=True))
    assert out.getvalue().split()[7:11] == ["RUNTIME", "QUEUE", "REPLICAS", "SCALE"]
    assert "kiban default 1-4 concurrency" in " ".join(out.getvalue().split())


@pytest.mark.parametrize("command", ["ls", "queues", "nodes", "services", "describe"])
def test_an_unknown_output_is_a_usage_error(kiban: Run, command: str) -> None:
    done = kiban(command, *(["x"] if command == "describe" else []), "-o", "xml")
    assert done.code == 2
    assert "'xml' is not one of 'table', 'wide', 'json', 'yaml'" in flat(done.err)


def test_output_names_in_any_case(kiban: Run, two_jobs: list[str]) -> None:
    assert {j["id"] for j in json.loads(kiban("ls", "-o", "JSON").out)} == set(two_jobs)


def test_state_in_any_case(kiban: Run, platform: Platform, two_jobs: list[str]) -> None:
    platform.loop.run_once()
    for word in ("running", "RUNNING", "Running", " running "):
        listed = json.loads(kiban("ls", "--state", word, "-o", "json").out)
        assert {j["id"] for j in listed} == set(two_jobs), word
    done = kiban("ls", "--state", "runing")
    assert done.code == 1 and "state[0]" in done.err and "'Running'" in done.err


def test_version(kiban: Run) -> None:
    done = kiban("--version")
    assert (done.code, done.out) == (0, f"kiban {__version__}\n")


# -- --watch -----------------------------------------------------------------------------------
class Ticks:
    """``time.sleep`` for a watch: runs ``between`` at each tick, then Ctrl-C after ``ticks``."""

    def __init__(self, ticks: int, between: Any = None) -> None:
        self.ticks = ticks
        self.between = between
        self.slept: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        if len(self.slept) >= self.ticks:
            raise KeyboardInterrupt
        if self.between is not None:
            self.between(len(self.slept))


JOB = {
    "apiVersion": "kiban/v1",
    "kind": "Job",
    "metadata": {"name": "third"},
    "spec": {"tasks": [{"command": ["true"]}]},
}


def test_ls_watch_shows_each_change_and_ends_on_ctrl_c(
    kiban: Run, api: TestClient, monkeypatch: pytest.MonkeyPatch, two_jobs: list[str]
) -> None:
    added: list[str] = []

    def submit_once(tick: int) -> None:
        if tick == 2:  # straight to the API: the CLI's output is being captured
            added.append(api.post("/api/v1/jobs", json=JOB).json()["id"])

    ticks = Ticks(4, submit_once)
    monkeypatch.setattr(watch_module.time, "sleep", ticks)
    done = kiban("ls", "--watch", "--interval", "0.5")
    assert done.code == 0, done.err
    assert "Traceback" not in done.err
    assert ticks.slept == [0.5] * 4
    tables = done.out.split("\n\n")
    assert len(tables) == 2  # four looks, one change: piped, a table per change
    assert added[0] not in tables[0] and added[0] in tables[1]


def test_watch_as_json_lines(
    kiban: Run, api: TestClient, monkeypatch: pytest.MonkeyPatch, two_jobs: list[str]
) -> None:
    def cancel_first(tick: int) -> None:
        if tick == 1:
            api.post(f"/api/v1/jobs/{two_jobs[0]}/cancel").raise_for_status()

    monkeypatch.setattr(watch_module.time, "sleep", Ticks(3, cancel_first))
    done = kiban("describe", two_jobs[0], "--watch", "-o", "json")
    assert done.code == 0, done.err
    states = [json.loads(line)["state"] for line in done.out.splitlines()]
    assert states == ["Pending", "Cancelled"]


def test_watch_redraws_in_place_on_a_terminal(
    kiban: Run, monkeypatch: pytest.MonkeyPatch, two_jobs: list[str]
) -> None:
    from kiban.cli import render

    monkeypatch.setattr(render.out, "_force_terminal", True)
    monkeypatch.setattr(render.out, "is_interactive", True)
    monkeypatch.setattr(watch_module.time, "sleep", Ticks(2))
    done = kiban("describe", two_jobs[0], "--watch")
    assert done.code == 0, done.err
    assert "\x1b[2K" in done.out  # lines erased and drawn again, not a second copy below
    assert done.out.count("(name first)") >= 2


def test_the_interval_has_a_floor(kiban: Run) -> None:
    done = kiban("ls", "--watch", "--interval", "0")
    assert done.code == 2 and "--interval" in flat(done.err)


def test_aligned_columns() -> None:
    from io import StringIO

    from rich.console import Console

    from kiban.cli.render import aligned

    text = aligned(["ID", "NAME"], [["a", "日本語"], ["long-id", "x"]])
    out = StringIO()
    Console(file=out, width=10).print(text, soft_wrap=True)  # narrower: nothing is cut
    assert out.getvalue().splitlines() == ["ID       NAME", "a        日本語", "long-id  x"]
    assert text.spans[0].style == "bold" and text.spans[0].end == len("ID       NAME")
