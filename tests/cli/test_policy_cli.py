"""``kiban policy``, ``kiban cordon``/``uncordon`` and ``kiban queues``, run in-process.

The CLI talks to the app through the SDK as it would over the network (the SDK's HTTP client
is the app's test client); each command's exit code, stdout and stderr are checked.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.cli import admin, main, policy, render
from kiban.platform import Platform
from kiban.sdk.client import Client

POLICY_FILE = """\
nodes:                       # read by kiban up; kiban policy apply leaves them out
  - {name: node-0, gpus: 2}
flavors:
  - {name: first, nodeLabels: {kubernetes.io/hostname: node-0}}
  - {name: rest}
cohorts:
  - {name: research}
queues:
  - {name: default, quota: {rest: {gpu: 4}}}
  - name: vision
    tenant: vision
    cohort: research
    quota: {first: {gpu: 2}, rest: {gpu: 4}}
    strategy: BestEffortFIFO
priorityClasses:
  - {name: normal, value: 1000, default: true, minRuntime: 10m}
"""


@dataclass
class Done:
    code: int
    out: str
    err: str


Run = Callable[..., Done]


@pytest.fixture
def run_as(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[str], Run]:
    """``run_as(token)("policy", "show")``: the CLI's exit code, stdout and stderr."""

    def with_token(token: str) -> Run:
        def connect() -> Client:
            client = Client(url="http://testserver", token=token)
            client._http.close()
            client._http = TestClient(
                create_app(platform), headers={"Authorization": f"Bearer {token}"}
            )
            return client

        def run(*args: str) -> Done:
            for module in (main, policy, admin):
                monkeypatch.setattr(module, "Client", connect)
            monkeypatch.setattr(sys, "argv", ["kiban", *args])
            capsys.readouterr()
            try:
                main.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            captured = capsys.readouterr()
            return Done(code, captured.out, captured.err)

        return run

    return with_token


@pytest.fixture
def kiban(run_as: Callable[[str], Run], admin_token: str) -> Run:
    return run_as(admin_token)


def one_error_line(done: Done, *needles: str) -> None:
    """Exit 1, nothing on stdout, one ``error:`` line naming ``needles``, no traceback."""
    assert done.code == 1, done
    assert done.out == ""
    assert "Traceback" not in done.err
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_policy_apply_show_and_history(kiban: Run, tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(POLICY_FILE)
    applied = kiban("policy", "apply", str(path))
    assert applied.code == 0, applied.err
    assert applied.out == ""
    message = "policy version 2 applied; queues created: vision; queues updated: default"
    assert message in applied.err
    assert "nodes are read by kiban up --config" in applied.err

    shown = kiban("policy", "show")
    assert shown.code == 0
    expected = {k: v for k, v in yaml.safe_load(POLICY_FILE).items() if k != "nodes"}
    assert yaml.safe_load(shown.out) == expected  # as written, ready to edit and apply again
    assert "policy version 2, applied" in shown.err and "by admin" in shown.err
    as_json = kiban("policy", "show", "-o", "json", "--effective")
    effective = json.loads(as_json.out)
    assert effective["priorityClasses"][0]["minRuntime"] == 600.0
    assert effective["fairShare"]["halfLife"] == 7 * 86400

    history = kiban("policy", "history")
    rows = [line.split() for line in history.out.strip().splitlines()]
    assert rows[0] == ["VERSION", "APPLIED", "BY", "FLAVORS", "QUEUES"]
    assert rows[1][0] == "2" and rows[1][-2:] == ["first,rest", "2"]
    assert rows[2][0] == "1" and rows[2][-2:] == ["-", "default"]
    assert [v["version"] for v in json.loads(kiban("policy", "history", "-o", "json").out)] == [
        2,
        1,
    ]

    unchanged = kiban("policy", "apply", str(path))
    assert "policy version 2 is already the current one" in unchanged.err


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("queues: [{name: default, quota: {gpu: -1}}]\n", ["queues[0].quota.gpu"]),
        (
            "flavors: [{name: b200, nodeLabels: {gpu.product: B200}}]\n",
            ["flavor b200 (gpu.product=B200) matches none of the 3 nodes"],
        ),
        (
            "cohorts: [{name: a, parent: b}, {name: b, parent: a}]\n",
            ["cohorts form a cycle: a -> b -> a"],
        ),
        ("queues: [unclosed\n", ["not valid YAML"]),
    ],
    ids=["422", "409", "cycle", "not-yaml"],
)
def test_policy_apply_refusals_are_one_line(
    kiban: Run, tmp_path: Path, text: str, needles: list[str]
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    one_error_line(kiban("policy", "apply", str(path)), *needles)
    assert yaml.safe_load(kiban("policy", "show").out) == {}  # nothing changed


def test_policy_apply_of_a_missing_file(kiban: Run, tmp_path: Path) -> None:
    one_error_line(kiban("policy", "apply", str(tmp_path / "nope.yaml")), "cannot read")


def test_cordon_and_uncordon(kiban: Run) -> None:
    done = kiban("cordon", "node-1")
    assert (done.code, done.out) == (0, "")
    assert "node node-1 cordoned" in done.err
    nodes = {n["name"]: n for n in json.loads(kiban("nodes", "-o", "json").out)}
    assert nodes["node-1"]["cordoned"] and not nodes["node-0"]["cordoned"]
    assert "Cordoned" in kiban("nodes").out
    done = kiban("uncordon", "node-1")
    assert (done.code, done.out) == (0, "")
    assert "node node-1 uncordoned" in done.err
    assert not json.loads(kiban("nodes", "-o", "json").out)[1]["cordoned"]
    one_error_line(kiban("cordon", "node-9"), "node node-9 not found")


def test_members_may_read_but_not_change(
    kiban: Run, run_as: Callable[[str], Run], tmp_path: Path
) -> None:
    token = kiban("admin", "create-token", "default", "alice").out.strip()
    alice = run_as(token)
    assert alice("policy", "show").code == 0
    one_error_line(alice("cordon", "node-0"), "admin")
    one_error_line(alice("policy", "history"), "admin")
    path = tmp_path / "p.yaml"
    path.write_text("queues: []\n")
    one_error_line(alice("policy", "apply", str(path)), "admin")


def test_queues_show_quota_per_flavor_and_cohort(kiban: Run, tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(POLICY_FILE)
    assert kiban("policy", "apply", str(path)).code == 0
    created = kiban(
        "admin",
        "create-queue",
        "nlp",
        "--tenant",
        "vision",
        "--quota",
        "rest=3",
        "--cohort",
        "research",
    )
    assert created.code == 0, created.err
    one_error_line(
        kiban("admin", "create-queue", "asr", "--tenant", "vision", "--gpu-quota", "2"),
        "quota: this policy declares flavors (first, rest): name the flavor",
    )
    rows = {line.split()[0]: line.split() for line in kiban("queues").out.strip().splitlines()}
    assert rows["QUEUE"] == [
        "QUEUE",
        "TENANT",
        "COHORT",
        "STRATEGY",
        "QUOTA",
        "GPUS",
        "IN",
        "USE",
        "PENDING",
        "RUNNING",
    ]
    assert rows["vision"][:6] == [
        "vision",
        "vision",
        "research",
        "BestEffortFIFO",
        "first:2",
        "rest:4",
    ]
    assert rows["default"][:5] == ["default", "default", "-", "StrictFIFO", "rest:4"]
    assert rows["nlp"][:5] == ["nlp", "vision", "research", "StrictFIFO", "rest:3"]


@pytest.mark.parametrize(
    ("queue", "cells"),
    [
        (
            {"quota": {"h100": {"gpu": 16}, "a100": {"gpu": 8}}, "cohort": "research"},
            ["research", "h100:16 a100:8"],
        ),
        ({"quota": {"default": {"gpu": 8}}, "cohort": None}, ["-", "8"]),  # no flavors declared
        ({"quota": None, "cohort": None}, ["-", "-"]),  # no quota
        ({"quota": {}, "cohort": None}, ["-", "0"]),
    ],
)
def test_one_queue_row(queue: dict[str, Any], cells: list[str]) -> None:
    row = render.queue_row(
        {
            "name": "q",
            "tenant": "t",
            "strategy": "StrictFIFO",
            "gpusInUse": 2,
            "pending": 1,
            "running": 1,
            **queue,
        }
    )
    assert len(row) == len(render.QUEUE_COLUMNS)
    assert [row[2], row[4]] == cells
