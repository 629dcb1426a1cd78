"""``kiban policy``, ``kiban cordon``/``uncordon`` and ``kiban queues``, run in-process.

The CLI talks to the app through the SDK as it would over the network (the SDK's HTTP client
is the app's test client); each command's exit code, stdout and stderr are checked.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import Run, one_error_line

from kiban.cli import render
from kiban.platform import Platform

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
    lines = kiban("queues").out.strip().splitlines()
    assert lines[0].split() == [
        "QUEUE",
        "TENANT",
        "COHORT",
        "STRATEGY",
        "FLAVOR",
        "NOMINAL",
        "USED",
        "BORROWED",
        "LENT",
        "PENDING",
        "RUNNING",
        "USAGE",
        "STANDING",
    ]
    # A queue with two flavors: its totals, then a row per flavor; with one: a single row.
    assert [" ".join(line.split()) for line in lines[1:]] == [
        "default default - StrictFIFO rest 4 0 0 0 0 0 0.0 GPU-h 0.0",
        "nlp vision research StrictFIFO rest 3 0 0 0 0 0 0.0 GPU-h 0.0",
        "vision vision research BestEffortFIFO all 6 0 0 0 0 0 0.0 GPU-h 0.0",
        "first 2 0 0 0 0",
        "rest 4 0 0 0 0",
    ]


def flavor(name: str, nominal: int | None, **numbers: int) -> dict[str, Any]:
    keys = ("used", "borrowed", "lent", "pendingJobs", "pendingGpus")
    return {"flavor": name, "nominal": nominal, **{k: numbers.get(k, 0) for k in keys}}


QUEUE = {
    "name": "q",
    "tenant": "t",
    "strategy": "StrictFIFO",
    "gpusInUse": 20,
    "pending": 3,
    "pendingGpus": 24,
    "running": 2,
    "borrowed": 4,
    "lent": 2,
    "usage": 4.5 * 3600,
    "standing": 2.25 * 3600,
}


@pytest.mark.parametrize(
    ("queue", "rows"),
    [
        (
            {
                "cohort": "research",
                "gpuQuota": 24,
                "flavors": [
                    flavor("h100", 16, used=20, borrowed=4, pendingJobs=2, pendingGpus=16),
                    flavor("a100", 8, lent=2),
                ],
            },
            [
                ["q", "t", "research", "StrictFIFO", "all", "24", "20", "4", "2", "3 (24 GPUs)",
                 "2", "4.5 GPU-h", "2.2"],
                ["", "", "", "", "h100", "16", "20", "4", "0", "2 (16 GPUs)", "", "", ""],
                ["", "", "", "", "a100", "8", "0", "0", "2", "0", "", "", ""],
            ],
        ),
        (  # no flavors declared: the one implicit flavor, shown as "-"
            {"cohort": None, "gpuQuota": 8, "flavors": [flavor("default", 8, used=20)]},
            [["q", "t", "-", "StrictFIFO", "-", "8", "20", "0", "0", "0", "2", "4.5 GPU-h", "2.2"]],
        ),
        (  # no quota and no flavor in use or named by a reason: the totals alone
            {"cohort": None, "gpuQuota": None, "flavors": []},
            [["q", "t", "-", "StrictFIFO", "-", "-", "20", "4", "2", "3 (24 GPUs)",
              "2", "4.5 GPU-h", "2.2"]],
        ),
    ],
)  # fmt: skip
def test_queue_rows(queue: dict[str, Any], rows: list[list[str]]) -> None:
    got = render.queue_rows({**QUEUE, **queue})
    assert all(len(row) == len(render.QUEUE_COLUMNS) for row in got)
    assert got == rows


def test_queues_mark_a_scavenger_queue_in_every_output(kiban: Run, tmp_path: Path) -> None:
    policy = yaml.safe_load(POLICY_FILE)
    del policy["nodes"]
    policy["queues"].append({"name": "spare", "tenant": "vision", "scavenger": True})
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(policy))
    assert kiban("policy", "apply", str(path)).code == 0
    for output in ("table", "wide"):
        listed = kiban("queues", "-o", output)
        assert listed.code == 0, listed.err
        strategies = {row.split()[0]: row.split()[3] for row in listed.out.splitlines()[1:]}
        assert {name: strategies[name] for name in ("default", "spare", "vision")} == {
            "default": "StrictFIFO",
            "spare": "StrictFIFO,scavenger",
            "vision": "BestEffortFIFO",
        }
    as_json = {q["name"]: q["scavenger"] for q in json.loads(kiban("queues", "-o", "json").out)}
    as_yaml = {q["name"]: q["scavenger"] for q in yaml.safe_load(kiban("queues", "-o", "yaml").out)}
    assert as_json == as_yaml == {"default": False, "spare": True, "vision": False}


def test_cutting_a_quota_below_use_states_the_plan_and_keeps_the_book(
    kiban: Run, platform: Platform, tmp_path: Path
) -> None:
    """The issue's case: a queue of a cohort where no queue lends its flavor uses 4 GPUs, and
    its quota is cut to 1: the 3 beyond it are over quota (lent by no one), and the answer says
    what comes back and when."""
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY_FILE)
    assert kiban("policy", "apply", str(path)).code == 0
    job = kiban("run", "--queue", "vision", "--nodes", "2", "--gpus", "2", "--", "train").out
    platform.loop.run_once()
    assert json.loads(kiban("describe", job.strip(), "-o", "json").out)["state"] == "Running"
    cut = yaml.safe_load(POLICY_FILE)
    del cut["nodes"]
    cut["queues"][1]["quota"] = {"first": {"gpu": 0}, "rest": {"gpu": 1}}
    path.write_text(yaml.safe_dump(cut))
    applied = kiban("policy", "apply", str(path))
    assert applied.code == 0, applied.err
    assert applied.err.splitlines() == [
        "policy version 3 applied; queues updated: vision",
        "drain plan (this change preempts nothing itself):",
        "  queue vision uses 4 rest GPUs, 3 more than the 1 the policy now lets it use (its "
        "quota and what cohort research can lend it now): its running jobs keep running; new "
        "rest work waits until its use is back within 1; otherwise they come back as its jobs "
        "end (no maxRuntime says when)",
    ]
    rows = [" ".join(line.split()) for line in kiban("queues").out.strip().splitlines()]
    assert "vision vision research BestEffortFIFO all 1 4 0 +3 over quota 0 0 1 0.0 GPU-h 0.0" in (
        rows
    ), rows
    vision = next(q for q in json.loads(kiban("queues", "-o", "json").out) if q["name"] == "vision")
    assert (vision["borrowed"], vision["lent"], vision["overQuota"]) == (0, 0, 3)
